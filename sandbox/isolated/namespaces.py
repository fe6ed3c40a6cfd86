"""Kernel isolation for sandbox workers: the namespaces, the view and the lock. What the kernel
refuses is reported as a weaker level (``sandbox/wire/levels.py``). docs/sandbox.md, "Who runs
what", has the whole model.
"""

from __future__ import annotations

import contextlib
import ctypes
import os

from sandbox.isolated import view
from sandbox.isolated.scratch import mount_scratch
from sandbox.isolated.syscalls import (
    AT_RECURSIVE,
    CLONE_NEWIPC,
    CLONE_NEWNET,
    CLONE_NEWNS,
    CLONE_NEWPID,
    CLONE_NEWUSER,
    MS_NODEV,
    MS_NOEXEC,
    MS_NOSUID,
    MS_PRIVATE,
    MS_REC,
    PR_SET_CHILD_SUBREAPER,
    PR_SET_DUMPABLE,
    check,
    libc,
    mount,
    prctl,
    read_only,
    unshare,
)
from sandbox.wire.levels import LEVEL_FULL, LEVEL_NAMESPACES, LEVEL_RLIMITS

SANDBOX_ID = 1000  # uid/gid of untrusted code inside the user namespace
HOST_ID_BASE = 1_500_000  # host uid of worker i's sandbox user: base + i (owns nothing)
NOBODY = 65534


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
    """Unshare user+mount+net+IPC; returns whether a separate sandbox uid is mapped. A
    multi-line id map must be written from the parent namespace with CAP_SETUID, so a
    privileged pool forks a helper that stays outside to write it."""
    ids = os.geteuid(), os.getegid()
    privileged = ids[0] == 0
    if not privileged:
        unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC)
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
        unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC)
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
    no_ipc_objects()
    level = LEVEL_NAMESPACES
    try:
        mount(None, "/", None, MS_REC | MS_PRIVATE, None)
        # The new root in a directory of its own, never the scratch directory, which is
        # emptied after each execution (with a half-built view's binds in it).
        root = scratch + ".view"
        os.mkdir(root, 0o755)
        view.build(root, scratch, view.python_profile())
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


# The worker's IPC namespace allows no SysV or POSIX IPC object: programs need none, each would
# hold memory no process limit counts and could outlive its execution. Set by the worker, as
# the namespace's owner; the children have no capability to raise them.
IPC_LIMITS = {
    "kernel/shmmni": "0",
    "kernel/shmall": "0",
    "kernel/msgmni": "0",
    "kernel/sem": "0 0 0 0",
    "fs/mqueue/queues_max": "0",
}


def no_ipc_objects() -> bool:
    """Set :data:`IPC_LIMITS` in the worker's fresh IPC namespace; False where ``/proc/sys``
    is read-only (a container runtime's): the namespace still dies with the worker, and a
    cgroup, where there is one, counts what its segments hold."""
    try:
        for name, value in IPC_LIMITS.items():
            with open(f"/proc/sys/{name}", "w") as f:
                f.write(value)
    except OSError:
        return False
    return True


def setup_unisolated(scratch: str) -> tuple[str, int]:
    """rlimits only: run children as ``nobody`` when we are root, so RLIMIT_NPROC counts."""
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    uid = NOBODY if os.geteuid() == 0 else os.geteuid()
    os.chown(scratch, uid, uid)
    return LEVEL_RLIMITS, uid


def mount_own_proc() -> bool:
    """Mount a procfs of the caller's PID namespace on ``/proc`` (the zygote's, before
    :func:`lock_down` makes it read-only); False if refused, as where a container runtime
    covers parts of the host's. The host's ``/proc`` would show programs every process of the
    machine with its command line."""
    try:
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
    except OSError:
        return False
    return True


def lock_down(outer_uid: int) -> int:
    """Lock the worker's view for good, in the zygote before it serves; returns the uid the
    children run as. Raises OSError where the kernel refuses a step.

    The view's mounts were made in the worker's user namespace, where an unprivileged pool's
    children would be uid 0 with CAP_SYS_ADMIN and could clear a read-only flag or unmount a
    hiding tmpfs. So the zygote becomes ``outer_uid`` and enters a second user namespace
    (mapping only :data:`SANDBOX_ID`) with a mount namespace of its own: the kernel locks every
    mount copied into a less privileged namespace. Then it drops every capability.
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


def pid_namespace(level: str) -> str:
    """Unshare a PID namespace, so the next process we fork (the zygote) is its init. Where
    the kernel refuses, the zygote is a plain child (a subreaper), reported as rlimits-only."""
    if level == LEVEL_RLIMITS:
        return level
    try:
        unshare(CLONE_NEWPID)
    except OSError:
        return LEVEL_RLIMITS
    return level
