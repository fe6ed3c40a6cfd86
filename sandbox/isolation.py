"""Kernel isolation for sandbox workers and the children they fork, through ``ctypes``.

A worker enters new user, network and mount namespaces once at start-up (the user
namespace maps an unprivileged sandbox uid, so ``RLIMIT_NPROC`` really applies, even when
the pool runs as root), hides every directory but the operating system's, the interpreter's
and this package's (``hide_host_files``), makes the whole mount tree read-only and mounts a
private, size-limited tmpfs as the scratch directory. Its zygote, PID 1 of the worker's PID
namespace (``sandbox/worker.py``, so every process an execution starts, ``setsid`` or not, can
be found and killed from there), then locks that view for good (:func:`lock_down`: a second
user and mount namespace, no capabilities; with the seccomp filter of ``sandbox/seccomp.py``).
Whatever the kernel refuses is reported as a weaker level; the pool refuses to run below the
full level unless ``sandbox.min_isolation`` accepts it. docs/sandbox.md has the whole model.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x2, 0x4, 0x8
MS_BIND, MS_REC, MS_PRIVATE = 0x1000, 0x4000, 0x40000
SYS_MOUNT_SETATTR = 442  # the same number on every architecture (asm-generic table)
AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY = -100, 0x8000, 0x1
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS, PR_SET_CHILD_SUBREAPER = 1, 4, 38, 36

LEVEL_FULL = "namespaces(user,net,pid,mount)+locked+seccomp+rlimits"
LEVEL_NAMESPACES = "namespaces(user,net,pid)+rlimits"
LEVEL_RLIMITS = "rlimits-only"
LEVEL_NUMBER = {LEVEL_FULL: 2.0, LEVEL_NAMESPACES: 1.0, LEVEL_RLIMITS: 0.0}
LEVEL_NAMED = {"full": LEVEL_FULL, "namespaces": LEVEL_NAMESPACES, "rlimits": LEVEL_RLIMITS}

SANDBOX_ID = 1000  # uid/gid of untrusted code inside the user namespace
HOST_ID_BASE = 1_500_000  # host uid of worker i's sandbox user: base + i (owns nothing)
NOBODY = 65534
SCRATCH_MB = 64
SCRATCH_INODES = 4096  # bounds what clean_scratch walks after a program made many files
MAX_PROCESSES = 64
MAX_OPEN_FILES = 64

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


def _mount(
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


def _write_id_maps(pid: int, ids: tuple[int, int], host_sandbox_id: int, privileged: bool) -> None:
    """Map ns root to ``ids`` (our uid and gid outside, read before unsharing: inside they
    read as the overflow id until the map exists) and, when we may, the sandbox id to an
    unused host id."""
    uid, gid = ids
    if privileged:
        uid_map = f"0 {uid} 1\n{SANDBOX_ID} {host_sandbox_id} 1\n"
        gid_map = f"0 {gid} 1\n{SANDBOX_ID} {host_sandbox_id} 1\n"
    else:
        uid_map, gid_map = f"0 {uid} 1\n", f"0 {gid} 1\n"
        with open(f"/proc/{pid}/setgroups", "w") as f:
            f.write("deny")
    with open(f"/proc/{pid}/uid_map", "w") as f:
        f.write(uid_map)
    with open(f"/proc/{pid}/gid_map", "w") as f:
        f.write(gid_map)


def _enter_user_namespace(host_sandbox_id: int) -> bool:
    """Unshare user+mount+net. Returns whether a separate sandbox uid is mapped.

    A multi-line id map must be written from the parent namespace with CAP_SETUID there, so
    a privileged pool forks a helper that stays outside and writes the map for us.
    """
    ids = os.geteuid(), os.getegid()
    privileged = ids[0] == 0
    if not privileged:
        unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET)
        _write_id_maps(os.getpid(), ids, host_sandbox_id, False)
        return False
    ready_r, ready_w = os.pipe()
    helper = os.fork()
    if helper == 0:
        code = 1
        try:
            os.close(ready_w)
            if os.read(ready_r, 1) == b"g":
                _write_id_maps(os.getppid(), ids, host_sandbox_id, True)
                code = 0
        finally:
            os._exit(code)
    os.close(ready_r)
    try:
        unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET)
    finally:
        os.write(ready_w, b"g" if _in_new_userns() else b"x")
        os.close(ready_w)
        _, status = os.waitpid(helper, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise OSError("could not write the user namespace id maps")
    return True


def _in_new_userns() -> bool:
    with open("/proc/self/uid_map") as f:
        return f.read().split() != ["0", "0", "4294967295"]


def setup_worker(index: int, scratch: str) -> tuple[str, int]:
    """Enter the strongest isolation available; returns (level, uid for the children)."""
    try:
        separate_uid = _enter_user_namespace(HOST_ID_BASE + index)
    except OSError:
        return setup_unisolated(scratch)
    sandbox_uid = SANDBOX_ID if separate_uid else 0
    level = LEVEL_NAMESPACES
    try:
        _mount(None, "/", None, MS_REC | MS_PRIVATE, None)
        hide_host_files(scratch)
        read_only("/", AT_RECURSIVE)
        # /proc stays writable here: the zygote writes its id maps through it, where it cannot
        # mount one of its own (a runtime masking parts of /proc), and makes it read-only then.
        read_only("/proc", clear=True)
        mount_scratch(scratch, sandbox_uid)
        level = LEVEL_FULL
    except OSError:
        os.chown(scratch, sandbox_uid, sandbox_uid)
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    return level, sandbox_uid


def setup_unisolated(scratch: str) -> tuple[str, int]:
    """rlimits only: run children as ``nobody`` when we are root, so RLIMIT_NPROC counts."""
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    uid = NOBODY if os.geteuid() == 0 else os.geteuid()
    os.chown(scratch, uid, uid)
    return LEVEL_RLIMITS, uid


# Top-level directories children keep seeing: the operating system an interpreter needs.
# Every other one (/home, /root, /work, /opt, /srv, /mnt, /var, /tmp, ...) is covered with an
# empty tmpfs: datasets with their reference answers, checkouts, credentials and other jobs'
# files stay out of sight, not merely read-only.
SYSTEM_DIRS = frozenset(
    {"bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "dev", "proc", "sys"}
)
# Inside them, covered all the same: what other processes of the host share through files.
SHARED_MEMORY_DIRS = ("/dev/shm", "/dev/mqueue")


def visible_paths() -> set[str]:
    """What children need beyond ``SYSTEM_DIRS``: the interpreter's prefixes (stdlib, the
    virtualenv's packages) and this package (its modules are trusted, not secret)."""
    paths = {os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, sys.exec_prefix)}
    paths.add(os.path.dirname(os.path.dirname(os.path.realpath(sys.executable))))
    paths.add(os.path.dirname(os.path.realpath(__file__)))
    return paths


def hide_host_files(scratch: str) -> None:
    """Cover every non-system top-level directory with an empty tmpfs, then bind the paths
    of :func:`visible_paths` back at their original places and create the scratch mount point.

    Handles on the kept paths are opened before anything is covered (afterwards they could
    not be reached), and bound back through ``/proc/self/fd``.
    """
    keep = sorted(visible_paths())
    handles = {path: os.open(path, os.O_PATH | os.O_DIRECTORY) for path in keep}
    for name in sorted(os.listdir("/")):
        top = os.path.join("/", name)
        if name in SYSTEM_DIRS or os.path.islink(top) or not os.path.isdir(top):
            continue
        _mount("tmpfs", top, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    for shared in SHARED_MEMORY_DIRS:  # other processes' shared memory (Ray's object store)
        if os.path.isdir(shared) and not os.path.islink(shared):
            _mount("tmpfs", shared, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    for path, fd in handles.items():
        top = "/" + path.strip("/").split("/")[0]
        if os.path.basename(top) not in SYSTEM_DIRS:
            os.makedirs(path, mode=0o755, exist_ok=True)
            _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC, None)
        os.close(fd)
    os.makedirs(scratch, mode=0o700, exist_ok=True)


def mount_scratch(scratch: str, owner: int) -> None:
    """A size- and inode-limited tmpfs on the scratch directory, owned by ``owner``."""
    options = f"size={SCRATCH_MB}m,nr_inodes={SCRATCH_INODES},mode=0700"
    _mount("tmpfs", scratch, "tmpfs", MS_NOSUID | MS_NODEV, options)
    os.chown(scratch, owner, owner)


def mount_own_proc() -> bool:
    """Mount a procfs of the caller's PID namespace on ``/proc``; False if refused. It is
    writable until :func:`lock_down` has written the zygote's id maps through it, and
    read-only after (kept so by the dropped capabilities and the seccomp filter).

    Called by the zygote, the namespace's init, in the worker's mount namespace. The host's
    ``/proc`` would show programs every process of the machine with its command line (where
    a job's secrets may be); this one shows the namespace: the zygote and the execution. The
    kernel refuses while parts of the host's ``/proc`` are covered, as container runtimes
    do; the host's then stays, and the pool says so when it starts.
    """
    try:
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
    except OSError:
        return False
    return True


def single_malloc_arena() -> None:
    """Make threads share glibc's main malloc arena (``mallopt(M_ARENA_MAX, 1)``).

    Each extra arena reserves 64 MiB of address space, which RLIMIT_AS counts: without this a
    child that starts a few threads fails with "can't start new thread" long before it uses
    ``memory_mb`` of memory. Called in the worker, so every child inherits it.
    """
    with contextlib.suppress(AttributeError):
        libc.mallopt(ctypes.c_int(-8), ctypes.c_int(1))


def release_free_memory() -> None:
    """Give glibc's free heap pages back to the kernel (``malloc_trim(0)``).

    Called once before the zygote is forked: a resident page costs every fork (its page table
    entry is copied) and every exit (torn down) although no one uses it. Some workers have
    a fair amount free there after start-up, some almost none (docs/benchmarks.md, sandbox
    section).
    """
    with contextlib.suppress(AttributeError):  # not glibc
        libc.malloc_trim(ctypes.c_size_t(0))


def rlimits(memory_bytes: int, cpu_s: int, file_bytes: int) -> list[tuple[int, int]]:
    """Limits for one execution, to be set with soft == hard so a child cannot raise them."""
    return [
        (resource.RLIMIT_AS, memory_bytes),
        (resource.RLIMIT_CPU, cpu_s),
        (resource.RLIMIT_NPROC, MAX_PROCESSES),
        (resource.RLIMIT_FSIZE, file_bytes),
        (resource.RLIMIT_NOFILE, MAX_OPEN_FILES),
        (resource.RLIMIT_CORE, 0),
    ]


def drop_privileges(uid: int, death_signal: bool) -> None:
    """Become the sandbox uid, then (``death_signal``) die with our parent: set after setuid,
    which clears it. Without it the parent must be a PID namespace's init, whose death the
    kernel turns into SIGKILL for every process of the namespace. No-new-privileges is not set
    here: the worker sets it before forking the zygote, and every child inherits it."""
    if uid != os.geteuid():
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    if death_signal:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def virtual_size(pid: int | str = "self") -> int:
    """A process's address space in bytes: a child it forks starts with this much mapped."""
    with open(f"/proc/{pid}/status", "rb") as f:
        for line in f:
            if line.startswith(b"VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def kill_namespace(main: int) -> int | None:
    """As PID 1 of a PID namespace: SIGKILL every other process in it and reap them all.

    ``kill(-1)`` from a namespace's init reaches every process of the namespace but itself,
    and every orphan is re-parented to init, so "no child left" means "nothing left". A
    process cannot fork once SIGKILL is pending, so the loop ends; it repeats the kill in case
    a fork completed while the first one was being delivered. Returns ``main``'s wait status
    (None if it was reaped before).
    """
    main_status = None
    while True:
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:  # ESRCH: nothing left to kill
            return main_status
        while True:
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                break
            if pid == main:
                main_status = status


def kill_tree(main: int, root: int) -> int | None:
    """Without a PID namespace: SIGKILL ``main`` and every descendant of ``root``.

    The zygote is then a child subreaper, so ``setsid`` grandchildren are re-parented to it
    instead of escaping to the host's init, and :func:`kill_descendants` reaches them.
    Returns ``main``'s wait status.
    """
    with contextlib.suppress(ProcessLookupError):
        os.kill(main, signal.SIGKILL)
    try:
        _, status = os.waitpid(main, 0)
    except ChildProcessError:
        status = None
    kill_descendants(root)
    return status


def descendants(root: int) -> dict[int, list[bytes]]:
    """Every process below ``root`` (found through /proc), with the fields of its
    ``/proc/<pid>/stat`` after the command name (``[0]`` state, ``[1]`` parent, ...)."""
    stats: dict[int, list[bytes]] = {}
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
                ppid = int(fields[1])
            except (OSError, ValueError, IndexError):
                continue  # ended while we looked
            stats[int(entry)] = fields
            children.setdefault(ppid, []).append(int(entry))
    found, stack = {}, list(children.get(root, []))
    while stack:
        pid = stack.pop()
        found[pid] = stats[pid]
        stack.extend(children.get(pid, []))
    return found


def kill_descendants(root: int) -> int:
    """SIGKILL every process below ``root``, the calling process, a child subreaper; returns
    how many.

    Kill every child and reap it; the children of a killed process are re-parented to us, so
    repeating that reaches the whole tree, level by level, and ends, since a process with
    SIGKILL pending cannot fork. The children come from ``/proc/<root>/task/<root>/children``,
    one small file, so an execution costs the same however many processes the machine runs.
    A kernel without that file (``CONFIG_PROC_CHILDREN``) gets a scan of ``/proc``.
    """
    killed = 0
    while found := _children(root):
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
        for pid in found:
            # ChildProcessError: a grandchild from the scan, not ours to reap (yet)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
    return killed


def _children(root: int) -> list[int]:
    try:
        with open(f"/proc/{root}/task/{root}/children", "rb") as f:
            return [int(pid) for pid in f.read().split()]
    except FileNotFoundError:
        return list(descendants(root))


def clean_scratch(scratch: str) -> None:
    """Empty the scratch directory after an execution (only the worker runs by then).

    An untouched directory (most executions) costs one ``listdir``; otherwise its entries
    are removed. The tmpfs itself is never replaced: the zygote's locked mount namespace
    (:func:`lock_down`) holds a copy of this mount, made when it locked, which would not see a
    new one; removing the files frees their space in the one tmpfs both see, and its inode
    limit bounds the walk.
    """
    try:
        entries = os.listdir(scratch)
    except OSError:
        return
    for entry in entries:
        path = os.path.join(scratch, entry)
        if os.path.isdir(path) and not os.path.islink(path):
            import shutil  # here: at the top it would load zlib, bz2 and lzma into every zygote

            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(path)


def lock_down(outer_uid: int) -> int:
    """Lock the worker's view for good, in the zygote before it serves; returns the uid the
    children run as (the zygote's own).

    The read-only bind mounts and hiding tmpfs mounts were made in the worker's user
    namespace, where a process with CAP_SYS_ADMIN could still clear their read-only flag or
    unmount them: an unprivileged pool's children are uid 0 there. So the zygote becomes
    ``outer_uid`` (the mapped sandbox id, or the worker's own id where only that is mapped),
    then enters a second user namespace and a mount namespace of its own: the kernel locks
    every mount copied into a less privileged namespace (no unmounting what one covers, no
    clearing a read-only flag), whatever capabilities that namespace grants. It maps only
    :data:`SANDBOX_ID` there, to ``outer_uid``, and then drops every capability, the bounding
    set included; the seccomp filter (``sandbox/seccomp.py``) and non-dumpability follow in
    the zygote. Raises OSError where the kernel refuses a step.
    """
    if os.geteuid() != outer_uid:
        os.setgroups([])
        os.setresgid(outer_uid, outer_uid, outer_uid)
        os.setresuid(outer_uid, outer_uid, outer_uid)
        prctl(PR_SET_DUMPABLE, 1)  # the uid change cleared it: /proc/self would be root's
    unshare(CLONE_NEWUSER | CLONE_NEWNS)
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")  # a single-line gid map written from inside requires it
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"{SANDBOX_ID} {outer_uid} 1\n")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"{SANDBOX_ID} {outer_uid} 1\n")
    # Writable until now, for the maps; read-only from here on. Not kernel-locked (it was
    # writable when copied into this namespace): no capability and the seccomp filter keep it.
    read_only("/proc")
    drop_capabilities()
    return SANDBOX_ID


PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 24, 47, 4
_CAPABILITY_VERSION_3 = 0x20080522


def drop_capabilities() -> None:
    """Empty the bounding, ambient, effective, permitted and inheritable sets (for good:
    without them, and with no-new-privileges, no later call or ``execve`` brings one back)."""
    last = 63
    with contextlib.suppress(OSError, ValueError), open("/proc/sys/kernel/cap_last_cap") as f:
        last = int(f.read())
    for cap in range(last + 1):
        prctl(PR_CAPBSET_DROP, cap)
    check(libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear ambient")
    header = (ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # two {effective, permitted, inheritable}, all empty
    check(libc.capset(ctypes.byref(header), ctypes.byref(data)), "capset")
