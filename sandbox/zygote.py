"""The zygote: the one process of a worker that forks, one child per execution.

It is PID 1 of the worker's PID namespace, so it can kill every process an execution left
behind, ``setsid()`` or double-forked, with ``kill(-1, SIGKILL)`` and reap them all (orphans
are re-parented to it). It is forked from the worker's server once, after every module is
imported and warmed up, and then does as little as possible, because every page a process
writes after a fork is a copy-on-write fault (~3 us each on a small VM): the server, which
never forks, does the JSON, the polling and the talking to the pool.

Protocol on a SOCK_SEQPACKET socketpair with the server:

- First, unasked: ``P1`` if the zygote mounted its PID namespace's ``/proc``, else ``P0``.
- ``R`` + three descriptors (job pipe read end, value pipe and output pipe write ends):
  fork a child, which reads its job (code, setup code, test parts, rlimits) from the job
  pipe and then runs it. Replies ``F`` only if the fork failed.
- ``K`` + grace byte: kill the execution's processes; reply ``S`` + (has status, wait status
  of the child, whether we killed it). With grace, a child that already closed its value
  pipe gets up to 100 ms to die on its own first, so the signal that really ended it is seen.

The job is in ``marshal`` format: one C call to decode in the child, where ``json.loads`` ran
enough Python to write ~30 more pages per execution. That direction only: the trusted server
encodes it. What the child sends back is JSON, because ``marshal`` is not safe to decode from
an adversary.
"""

from __future__ import annotations

import marshal
import os
import signal
import socket
import struct
import time
from resource import setrlimit
from typing import NamedTuple

from sandbox import child, isolation

STATUS = struct.Struct("<iii")


class _ChildSetup(NamedTuple):
    """What every child needs besides its job, made once per zygote: each child inherits it."""

    scratch: str
    uid: int
    devnull: int  # the child's stdin
    death_signal: bool  # False as a PID namespace's init, whose death kills the namespace


def serve(ctl: socket.socket, scratch: str, uid: int, mount_proc: bool) -> None:
    """The zygote's loop; never returns (exits when the server's end closes).

    First, as the namespace's init and where ``mount_proc`` (the worker has its own mount
    namespace), it mounts the namespace's ``/proc`` and tells the server whether it could:
    ``P1`` or ``P0``.
    """
    code = 0
    try:
        isolation.prctl(isolation.PR_SET_PDEATHSIG, signal.SIGKILL)
        in_namespace = os.getpid() == 1
        if not in_namespace:  # orphans come to us: isolation.kill_descendants reaches them
            isolation.prctl(isolation.PR_SET_CHILD_SUBREAPER, 1)
        mounted = in_namespace and mount_proc and isolation.mount_own_proc()
        ctl.send(b"P1" if mounted else b"P0")
        setup = _ChildSetup(scratch, uid, os.open(os.devnull, os.O_RDONLY), not in_namespace)
        main = -1
        while True:
            message, fds, _, _ = socket.recv_fds(ctl, 16, 3)
            if not message:
                break
            if message[:1] == b"R" and len(fds) == 3:
                main = _start(fds, setup)
                if main < 0:
                    ctl.send(b"F")
            else:
                for fd in fds:
                    os.close(fd)
                grace = message[1:2] == b"1"
                status, ours = _sweep(main, grace, in_namespace) if main > 0 else (None, True)
                main = -1
                ctl.send(b"S" + STATUS.pack(status is not None, status or 0, ours))
    except BaseException:
        code = 1
    finally:
        os._exit(code)


def _start(fds: list[int], setup: _ChildSetup) -> int:
    """Fork the execution's child; the pipe ends are the child's alone afterwards."""
    try:
        pid = os.fork()
    except OSError:
        pid = -1
    if pid == 0:
        _child(fds, setup)
    for fd in fds:
        os.close(fd)
    return pid


def _sweep(main: int, grace: bool, in_namespace: bool) -> tuple[int | None, bool]:
    """Kill every process of the execution; returns (the child's wait status, killed by us).

    ``in_namespace``: the zygote is its PID namespace's init (found once, in :func:`serve`).
    """
    if grace:
        for _ in range(100):
            pid, status = os.waitpid(main, os.WNOHANG)
            if pid:
                if in_namespace:
                    isolation.kill_namespace(main)
                else:
                    isolation.kill_descendants(os.getpid())
                return status, False
            time.sleep(0.001)
    if in_namespace:
        return isolation.kill_namespace(main), True
    return isolation.kill_tree(main, os.getpid()), True


def _child(fds: list[int], setup: _ChildSetup) -> None:
    """Runs in the child: read the job, then descriptors, limits, privileges, the harness.

    The environment is already empty, the umask and no-new-privileges already set (in the
    worker, inherited): every Python line here costs page faults in every child.
    """
    job_r, val_w, out_w = fds
    try:
        chunks = []
        while chunk := os.read(job_r, 1 << 16):
            chunks.append(chunk)
        job = marshal.loads(b"".join(chunks))
        os.setsid()
        os.dup2(setup.devnull, 0)
        os.dup2(out_w, 1)
        os.dup2(out_w, 2)
        os.dup2(val_w, 3)
        os.closerange(4, 1 << 16)
        os.chdir(setup.scratch)
        for which, value in job["limits"]:
            setrlimit(which, (value, value))
        isolation.drop_privileges(setup.uid, setup.death_signal)
    except BaseException:
        os._exit(98)
    child.run(job["code"], job["setup_code"], job["parts"])
