"""The zygote: the one process of a worker that forks, one child per execution.

PID 1 of the worker's PID namespace, so ``kill(-1, SIGKILL)`` reaches every process an
execution left. It does as little as it can (every page it writes after a fork is a
copy-on-write fault): its loop runs in C (``_zygote.c``) where it was built and the zygote is
its namespace's init, else in Python (:func:`_python_loop`). docs/sandbox.md, "Process layout".

Protocol on a SOCK_SEQPACKET socketpair with the server:

- First, unasked: ``P``, then ``1`` if it mounted its namespace's ``/proc`` (else ``0``),
  ``c`` for the C loop (else ``p``), ``L`` if it locked itself down (else ``-``), the number
  of hot pages pinned (:data:`PINNED`), then as UTF-8 why none were pinned, a NUL, and why it
  could not lock itself down ("" for each that went well).
- ``R`` + three descriptors (job pipe read end, value and output pipe write ends): fork a
  child, which reads its job (:func:`frame_job`: ``marshal``, which only the trusted server
  writes; the child's records come back as JSON) and runs it. Replies ``F`` only if the fork
  failed. A split job (``split.py``) sends five, the call pipes' ends last: ``R`` for the
  program's process, then ``r`` for its tests'. A whole program's (``stdio``) test input
  follows its job in the pipe; its stdout is the value pipe, its stderr the output pipe.
- ``K`` + grace byte: kill the execution's processes; reply ``S`` + :data:`STATUS` (has
  status, the child's wait status, whether we killed it). With grace, a child that closed
  its value pipe gets up to 100 ms to die on its own, so the signal that ended it is seen.
"""

from __future__ import annotations

import importlib.machinery
import marshal
import os
import signal
import socket
import struct
import time
import types
from resource import setrlimit
from typing import NamedTuple

from sandbox.isolated import child, limits, namespaces, pinning, reaping, seccomp, split
from sandbox.isolated.syscalls import (
    PR_SET_CHILD_SUBREAPER,
    PR_SET_DUMPABLE,
    PR_SET_PDEATHSIG,
    prctl,
)

STATUS = struct.Struct("<iii")
PINNED = struct.Struct("<I")
JOB_HEADER = struct.Struct("<Q")  # the job's length: a whole program's stdin follows it


def frame_job(payload: dict) -> bytes:
    """A job as the child reads it: its length, then ``marshal``'s bytes."""
    data = marshal.dumps(payload)
    return JOB_HEADER.pack(len(data)) + data


def _read_job(fd: int) -> dict:
    (size,) = JOB_HEADER.unpack(child.read_exactly(fd, JOB_HEADER.size))
    return marshal.loads(child.read_exactly(fd, size))


class _ChildSetup(NamedTuple):
    """What every child needs besides its job, made once per zygote: each child inherits it."""

    scratch: str
    uid: int
    devnull: int  # the child's stdin
    death_signal: bool  # False as a PID namespace's init, whose death kills the namespace
    # The execution cgroup's cgroup.procs, opened by the front: the child writes itself in.
    cgroup_fds: tuple[int, ...] = ()
    # No cgroup: the child refuses itself a second process and memfds (``seccomp.py``).
    fallback: seccomp.Filter | None = None


def serve(
    ctl: socket.socket,
    scratch: str,
    uid: int,
    full: bool,
    calibration: bytes | None,
    loop: types.ModuleType | None = None,
    memory: tuple[tuple[int, ...], seccomp.Filter | None] = ((), None),
) -> None:
    """The zygote's loop; never returns (exits when the server's end closes).

    As the namespace's init and where ``full`` (the worker has its read-only view), it mounts
    the namespace's ``/proc``, pins its hot pages (given a ``calibration`` job) and locks
    itself down before any program runs, then tells the server how each went. ``memory``:
    the cgroup.procs descriptors every child joins, and the fallback filter (no cgroup).
    """
    code = 0
    try:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        # A namespace's init drops only the signals it has no handler for: with Python's SIGINT
        # handler, a program's SIGINT to PID 1 ended the zygote.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        in_namespace = os.getpid() == 1
        if not in_namespace:  # orphans come to us: reaping.kill_descendants reaches them
            prctl(PR_SET_CHILD_SUBREAPER, 1)
        mounted = in_namespace and full and namespaces.mount_own_proc()
        devnull = os.open(os.devnull, os.O_RDONLY)
        setup = _ChildSetup(scratch, uid, devnull, not in_namespace, *memory)
        pinned, note = _pin_hot_pages(calibration, setup) if calibration else (0, "off")
        lock_note = _lock_down(uid) if full else "the worker has no read-only view"
        if full and not lock_note:  # children run as we do: drop_privileges has nothing to do
            setup = setup._replace(uid=os.geteuid())
        if setup.cgroup_fds and not lock_note:
            lock_note = _probe_cgroup(setup.cgroup_fds)
        in_c = loop is not None and in_namespace
        flags = (b"1" if mounted else b"0") + (b"c" if in_c else b"p")
        flags += b"-" if lock_note else b"L"
        notes = f"{note}\0{lock_note}".encode(errors="replace")
        ctl.send(b"P" + flags + PINNED.pack(pinned) + notes)
        if in_c:
            fds = loop.serve(ctl.fileno())  # returns in a new child, or at the end
            if fds is not None:
                _child(list(fds), setup)
            return
        _python_loop(ctl, setup, in_namespace)
    except BaseException:
        code = 1
    finally:
        os._exit(code)


def _python_loop(ctl: socket.socket, setup: _ChildSetup, in_namespace: bool) -> None:
    """The protocol of the module docstring in Python (``_zygote.c`` does it in C). Returns in
    the zygote only, when the server's end closes; a child runs its job."""
    main = -1
    while True:
        message, fds, _, _ = socket.recv_fds(ctl, 16, 5)
        if not message:
            return
        if message[:1] in (b"R", b"r") and len(fds) in (3, 5):
            pid = _start(fds, setup)
            main = pid if message[:1] == b"R" else main
            if pid < 0:
                ctl.send(b"F")
        else:
            for fd in fds:
                os.close(fd)
            grace = message[1:2] == b"1"
            status, ours = _sweep(main, grace, in_namespace) if main > 0 else (None, True)
            main = -1
            ctl.send(b"S" + STATUS.pack(status is not None, status or 0, ours))


def _lock_down(uid: int) -> str:
    """Lock the view and drop every capability (``namespaces.lock_down``), install the seccomp
    filter and become non-dumpable; every child inherits all of it. Returns why a step failed
    ("" when all held): the worker then reports a weaker level. After the pinning, whose
    calibration needs both processes dumpable; a change of uid clears the death signal."""
    try:
        namespaces.lock_down(uid)
        seccomp.install()
        prctl(PR_SET_DUMPABLE, 0)
        why = ""
    except OSError as exc:
        why = f"could not lock the sandbox down: {exc}"
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    return why


def _probe_cgroup(fds: tuple[int, ...]) -> str:
    """Join the execution cgroup once in a child, as every child will; returns why it could
    not ("" when it could). A child that cannot join exits before its program runs, which
    would judge every program a ``runtime_error`` silently: the worker reports the weaker
    level instead, and the pool refuses to start, saying this."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            for fd in fds:
                os.write(fd, b"0")
        except OSError as exc:
            code = exc.errno or 1
        os._exit(code)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    return f"could not join the execution cgroup: {os.strerror(code)}" if code else ""


def _pin_hot_pages(calibration: bytes, setup: _ChildSetup) -> tuple[int, str]:
    """Run the ``calibration`` job (it ends by stopping itself) in one child and pin the pages
    it copied; returns (pages pinned, why not). The child keeps our uid: one that changed its
    uid is not dumpable, and its ``/proc/PID/pagemap`` would be closed to us."""
    try:
        if os.readlink("/proc/self") != str(os.getpid()):
            return 0, "/proc shows another PID namespace than the zygote's"
    except OSError as exc:
        return 0, f"no /proc: {exc}"
    job_r, job_w = os.pipe()
    val_r, val_w = os.pipe()
    out_r, out_w = os.pipe()
    try:
        os.write(job_w, calibration)  # a few hundred bytes, framed: fits in the pipe
        os.close(job_w)
        job_w = -1
        fds = [job_r, val_w, out_w]
        pages = pinning.calibrate(lambda: _child(fds, setup._replace(uid=os.geteuid())))
        if not pages:
            return 0, "the calibration child did not stop"
        pinning.pin(pages)  # the ring's fd is never closed: the pin lasts as long as the ring
    except OSError as exc:
        return 0, exc.strerror or str(exc)
    except Exception as exc:  # an optimisation: whatever went wrong, serve unpinned
        return 0, f"calibration failed: {exc!r}"
    finally:
        for fd in (job_r, job_w, val_r, val_w, out_r, out_w):
            if fd >= 0:
                os.close(fd)
    return len(pages), ""


def _start(fds: list[int], setup: _ChildSetup) -> int:
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
    """Kill every process of the execution; returns (the child's wait status, killed by us)."""
    if grace:
        for _ in range(100):
            pid, status = os.waitpid(main, os.WNOHANG)
            if pid:
                if in_namespace:
                    reaping.kill_namespace(main)
                else:
                    reaping.kill_descendants(os.getpid())
                return status, False
            time.sleep(0.001)
    if in_namespace:
        return reaping.kill_namespace(main), True
    return reaping.kill_tree(main, os.getpid()), True


def _child(fds: list[int], setup: _ChildSetup) -> None:
    """Runs in the child: read the job, then descriptors, limits, privileges, the harness.
    What can be is set in the worker and inherited: every Python line here costs page faults
    in every child."""
    job_r, val_w, out_w = fds[:3]
    calls = fds[3:]  # a split job's process: its call pipes' ends, in and out
    try:
        # First, so that all it allocates is charged to the group. The kernel checks the
        # credentials of the descriptor's opener (the front), not ours.
        for fd in setup.cgroup_fds:
            os.write(fd, b"0")
        job = _read_job(job_r)
        os.setsid()
        stdio = job.get("stdio", False)
        # Received descriptors are >= 3 (0, 1 and 2 are open here), so no dup2 below
        # overwrites one still to be read; the call pipes' ends go above every descriptor
        # used here first (what they replace is closed below anyway), then to 4 and 5.
        park = max(job_r, val_w, out_w, setup.devnull, *calls) + 1
        calls = [os.dup2(fd, park + i) for i, fd in enumerate(calls)]
        os.dup2(job_r if stdio else setup.devnull, 0)
        os.dup2(val_w if stdio else out_w, 1)
        os.dup2(out_w, 2)
        if not stdio:
            os.dup2(val_w, 3)
        for target, fd in zip((split.IN_FD, split.OUT_FD), calls):
            os.dup2(fd, target)
        os.closerange(3 if stdio else 6 if calls else 4, 1 << 16)
        if job.get("split"):  # the program's process writes no record
            os.close(3)
        os.chdir(setup.scratch)
        for which, value in job["limits"]:
            setrlimit(which, (value, value))
        if setup.fallback is not None:
            setup.fallback.install()  # the fallback filter, assembled once in the worker
        limits.drop_privileges(setup.uid, setup.death_signal)
    except BaseException:
        os._exit(98)
    if job.get("native"):  # a compiler, a compiled program, a native validator
        child.run_command(job["argv"], job["files"])
    if stdio:
        child.run_program(job["code"], job.get("argv"), job.get("files"))
    if job.get("tests"):  # a split job's tests' process (sandbox/isolated/split.py)
        split.run_tests(job)
    if job.get("split"):  # and its program's
        split.serve(job)
    child.run(job["code"], job["setup_code"], job["parts"])


def load_loop(path: str | None) -> tuple[types.ModuleType | None, str]:
    """The zygote's C loop from the library the pool built, or None and why not (the zygote
    then runs the Python loop). Loaded before the zygote is forked, which inherits it."""
    if path is None:
        return None, ""
    loader = importlib.machinery.ExtensionFileLoader("sandbox.isolated._zygote", path)
    try:
        spec = importlib.machinery.ModuleSpec(loader.name, loader, origin=path)
        module = loader.create_module(spec)
        loader.exec_module(module)
    except (ImportError, OSError) as exc:
        return None, f"could not load {path}: {exc}"
    return module, ""
