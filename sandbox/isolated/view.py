"""The file system programs see: a fresh root built from an allowlist, not the host's with
parts hidden. Built once by the worker's server in its own mount namespace: a small tmpfs
becomes the root, holding read-only binds of only what a program needs, and the host's root is
detached. docs/sandbox.md lists what a program can read.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

from sandbox.isolated.syscalls import (
    MS_BIND,
    MS_NODEV,
    MS_NOSUID,
    MS_REC,
    check,
    libc,
    mount,
)

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))  # sandbox/
# The project's checkout: never bound whole (its tests, its data), nor anything holding it.
CHECKOUT = os.path.dirname(PACKAGE_DIR)
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
MNT_DETACH = 2
OLD_ROOT = "/.old-root"

# The operating system's programs and shared libraries: what an interpreter and the
# extension modules it loads link against. Top-level symbolic links (a merged /usr: /lib ->
# usr/lib) are made again as links.
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Host files bound into a fresh /etc: the dynamic linker's cache (without it, a library found
# through /etc/ld.so.conf.d, libffi for ctypes among them, is not found) and the time zone.
ETC_FILES = ("ld.so.cache", "localtime")
# Files written into /etc: the two users a program may see (root, the owner of the view, and
# the sandbox id) and localhost.
ETC_WRITTEN = {
    "passwd": "root:x:0:0:root:/:/bin/false\nsandbox:x:1000:1000:sandbox:/:/bin/false\n",
    "group": "root:x:0:\nsandbox:x:1000:\n",
    "hosts": "127.0.0.1 localhost\n::1 localhost\n",
}
# Devices: the four a program may use; the rest of the host's /dev (GPUs, disks, the host's
# shared memory, its message queues) is not there.
DEVICES = ("null", "zero", "random", "urandom")
DEVICE_LINKS = {
    "fd": "/proc/self/fd",
    "stdin": "/proc/self/fd/0",
    "stdout": "/proc/self/fd/1",
    "stderr": "/proc/self/fd/2",
}


@dataclass
class Profile:
    """What one language's programs see: directories bound read-only at their own paths."""

    binds: list[str] = field(default_factory=list)


def python_profile() -> Profile:
    """The interpreter's prefixes (stdlib, the virtualenv's packages that tests may import)
    and the ``sandbox`` package (the harness; trusted, not secret), beside the system dirs."""
    paths = {os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, sys.exec_prefix)}
    paths.add(os.path.dirname(os.path.dirname(os.path.realpath(sys.executable))))
    paths.add(PACKAGE_DIR)
    return Profile(binds=sorted(paths))


def build(new_root: str, scratch: str, profile: Profile) -> None:
    """Make ``new_root`` (an existing directory) the root of this mount namespace, holding
    only the allowlist; the host's root is detached. Raises OSError where the kernel refuses.
    ``/proc`` is the host's, bound: the kernel allows the zygote's own procfs on top only where
    one is fully visible. The scratch's tmpfs is mounted afterwards (``scratch.py``).
    """
    mount("tmpfs", new_root, "tmpfs", MS_NOSUID | MS_NODEV, "size=4m,nr_inodes=4096,mode=0755")
    try:
        _fill(new_root, scratch, profile)
        _pivot(new_root)
    except OSError:
        os.chdir("/")
        libc.umount2(new_root.encode(), MNT_DETACH)  # every bind made under it goes too
        raise


def _fill(new_root: str, scratch: str, profile: Profile) -> None:
    """The binds, files and mount points of the new root (still at ``new_root``). A checkout
    under a bound directory (the Python image's ``/usr/src/app``) is covered by an empty tmpfs,
    with the profile's paths inside it (the ``sandbox`` package, a virtualenv) bound again."""
    for top in SYSTEM_DIRS:
        if os.path.islink(top):
            os.symlink(os.readlink(top), new_root + top)
        elif os.path.isdir(top):
            _bind(top, new_root)
    binds = [path for path in profile.binds if path != "/" and not _under(CHECKOUT, path)]
    for path in binds:
        if not any(_under(path, bound) for bound in (*SYSTEM_DIRS, *_earlier(binds, path))):
            _bind(path, new_root)
    if any(_under(CHECKOUT, bound) for bound in (*SYSTEM_DIRS, *binds)):
        mount("tmpfs", new_root + CHECKOUT, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
        for path in binds:
            if _under(path, CHECKOUT):
                _bind(path, new_root)
    _etc(new_root)
    _dev(new_root)
    _bind("/proc", new_root)
    os.makedirs(new_root + scratch, mode=0o755, exist_ok=True)


def _under(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def _earlier(binds: list[str], path: str) -> list[str]:
    return [p for p in binds if p < path]


def _bind(path: str, new_root: str) -> None:
    target = new_root + path
    if os.path.isdir(path):
        os.makedirs(target, mode=0o755, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
        with open(target, "w"):
            pass
    mount(path, target, None, MS_BIND | MS_REC, None)


def _etc(new_root: str) -> None:
    os.mkdir(new_root + "/etc", 0o755)
    for name, text in ETC_WRITTEN.items():
        with open(f"{new_root}/etc/{name}", "w") as f:
            f.write(text)
    for name in ETC_FILES:
        if os.path.isfile(host := os.path.realpath(f"/etc/{name}")):
            _bind_file(host, f"{new_root}/etc/{name}")


def _dev(new_root: str) -> None:
    os.mkdir(new_root + "/dev", 0o755)
    for name in DEVICES:
        _bind_file(f"/dev/{name}", f"{new_root}/dev/{name}")
    for name, target in DEVICE_LINKS.items():
        os.symlink(target, f"{new_root}/dev/{name}")


def _bind_file(source: str, target: str) -> None:
    with open(target, "w"):
        pass
    mount(source, target, None, MS_BIND, None)


def _pivot(new_root: str) -> None:
    number = SYS_PIVOT_ROOT.get(os.uname().machine)
    if number is None:
        raise OSError(38, f"no pivot_root number for {os.uname().machine}")
    os.mkdir(new_root + OLD_ROOT, 0o700)
    os.chdir(new_root)
    check(libc.syscall(number, b".", OLD_ROOT[1:].encode()), "pivot_root")
    os.chdir("/")
    check(libc.umount2(OLD_ROOT.encode(), MNT_DETACH), "umount old root")
    os.rmdir(OLD_ROOT)
