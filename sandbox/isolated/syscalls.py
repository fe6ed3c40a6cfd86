"""The kernel calls the isolated side needs and ``os`` lacks, through ``ctypes`` (no compiler,
no third-party package), each raising OSError with the call's errno where the kernel refuses.
"""

from __future__ import annotations

import ctypes
import os

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x2, 0x4, 0x8
MS_BIND, MS_REC, MS_PRIVATE = 0x1000, 0x4000, 0x40000
SYS_MOUNT_SETATTR = 442  # the same number on every architecture (asm-generic table)
AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY = -100, 0x8000, 0x1
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS, PR_SET_CHILD_SUBREAPER = 1, 4, 38, 36

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


class _MountAttr(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("attr_set", "attr_clr", "propagation", "userns_fd")]


def check(result: int, what: str) -> None:
    """Raise the call's errno as an OSError naming ``what`` unless ``result`` is 0."""
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def syscall(number: int, *args: object, what: str) -> int:
    """A raw system call (integers passed as C longs, as ``syscall(2)`` reads them); its
    result, or OSError naming ``what``."""
    values = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    result = libc.syscall(ctypes.c_long(number), *values)
    check(min(result, 0), what)  # a non-negative result (a descriptor, a count) is success
    return result


def unshare(flags: int) -> None:
    check(libc.unshare(ctypes.c_int(flags)), "unshare")


def prctl(option: int, arg: int) -> None:
    check(libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0), f"prctl({option})")


def mount(
    source: str | None, target: str, fstype: str | None, flags: int, data: str | None
) -> None:
    enc = [s.encode() if s is not None else None for s in (source, target, fstype, data)]
    check(libc.mount(enc[0], enc[1], enc[2], ctypes.c_ulong(flags), enc[3]), f"mount {target}")


def read_only(path: str, flags: int = 0, clear: bool = False) -> None:
    """Make the mount at ``path`` read-only (``AT_RECURSIVE`` in ``flags``: every mount below
    it too; ``clear``: writable again) through ``mount_setattr``, which leaves each mount's
    other flags as they are."""
    attr = (
        _MountAttr(0, MOUNT_ATTR_RDONLY, 0, 0) if clear else _MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)
    )
    result = libc.syscall(
        SYS_MOUNT_SETATTR, AT_FDCWD, path.encode(), flags, ctypes.byref(attr), ctypes.c_size_t(32)
    )
    check(result, f"mount_setattr {path}")
