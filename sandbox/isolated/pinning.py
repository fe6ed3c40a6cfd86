"""The zygote's hot pages, pinned, so that every fork copies them at once instead of faulting.

The kernel copies a *pinned* anonymous page inside ``fork()`` (Linux >= 5.9, "early COW"),
which costs less than the copy-on-write fault it replaces. So the zygote finds the pages an
execution writes (:func:`calibrate`) and pins them as io_uring buffers (:func:`pin`), the one
long-term pin an unprivileged process can take. docs/sandbox.md, "Pinned hot pages".
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import resource
import signal
import struct
import time
from collections.abc import Callable

from sandbox.isolated.syscalls import syscall

SYS_IO_URING_SETUP = 425  # the same numbers on every architecture (asm-generic table)
SYS_IO_URING_REGISTER = 427
IORING_REGISTER_BUFFERS = 0
IO_URING_PARAMS_BYTES = 120
PAGE = os.sysconf("SC_PAGE_SIZE")
PRESENT, EXCLUSIVE = 1 << 63, 1 << 56  # /proc/PID/pagemap: page present, mapped once only
CALIBRATION_TIMEOUT_S = 10.0


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def private_ranges() -> list[tuple[int, int]]:
    """This process's private writable mappings, which a fork shares copy-on-write: the heaps,
    the stack and the libraries' data; not the kernel's special mappings (vvar, vdso)."""
    ranges = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            name = fields[5] if len(fields) > 5 else ""
            if not fields[1].startswith("rw") or fields[1][3] != "p":
                continue
            if name.startswith("[") and name not in ("[heap]", "[stack]"):
                continue
            start, end = (int(x, 16) for x in fields[0].split("-"))
            ranges.append((start, end))
    return ranges


def pages_with(pid: int | str, ranges: list[tuple[int, int]], bits: int) -> set[int]:
    """The addresses of the pages in ``ranges`` whose ``/proc/PID/pagemap`` entry has ``bits``.
    Read with ``pread`` on a raw descriptor: the fewer objects we touch, the fewer of our pages
    we copy while a calibration child is alive."""
    fd = os.open(f"/proc/{pid}/pagemap", os.O_RDONLY)
    try:
        entries = [
            os.pread(fd, (end - start) // PAGE * 8, start // PAGE * 8) for start, end in ranges
        ]
    finally:
        os.close(fd)
    pages = set()
    for (start, _), data in zip(ranges, entries):
        for index, (entry,) in enumerate(struct.iter_unpack("<Q", data)):
            if entry & bits == bits:
                pages.add(start + index * PAGE)
    return pages


def calibrate(run_child: Callable[[], object]) -> list[int]:
    """Fork ``run_child``, which must stop itself (SIGSTOP); returns the pages to pin: those of
    our private mappings that the stopped child maps alone (copied since the fork, because it
    or we wrote them) and that we have (a page we never touched would be created by the pin).
    Empty if the child did not stop in time."""
    ranges = private_ranges()
    pid = os.fork()
    if pid == 0:
        try:
            run_child()
        finally:
            os._exit(1)
    try:
        deadline = time.monotonic() + CALIBRATION_TIMEOUT_S
        status = 0
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG | os.WUNTRACED)
            if done:
                break
            time.sleep(0.001)
        if not os.WIFSTOPPED(status):
            return []
        written = pages_with(pid, ranges, PRESENT | EXCLUSIVE)
    finally:  # a child that exited instead of stopping was reaped above
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
    return sorted(written & pages_with("self", ranges, PRESENT))


def pin(pages: list[int]) -> int:
    """Pin ``pages`` (sorted addresses) as io_uring fixed buffers; returns the ring's fd, which
    must stay open (and be closed in every child). Raises OSError (io_uring refused, or
    RLIMIT_MEMLOCK exceeded: ENOMEM)."""
    try:
        return _register(pages)
    except OSError as exc:
        raise OSError(exc.errno, _explain(exc, len(pages))) from exc


def _register(pages: list[int]) -> int:
    runs: list[list[int]] = []
    for page in pages:
        if runs and runs[-1][0] + runs[-1][1] == page:
            runs[-1][1] += PAGE
        else:
            runs.append([page, PAGE])
    params = ctypes.create_string_buffer(IO_URING_PARAMS_BYTES)
    ring = syscall(SYS_IO_URING_SETUP, 1, params, what="io_uring_setup")
    iovecs = (_Iovec * len(runs))(*[_Iovec(start, size) for start, size in runs])
    try:
        syscall(
            SYS_IO_URING_REGISTER,
            ring,
            IORING_REGISTER_BUFFERS,
            iovecs,
            len(runs),
            what="io_uring_register",
        )
    except OSError:
        os.close(ring)
        raise
    return ring


def _explain(exc: OSError, pages: int) -> str:
    """What a refusal means for the person who reads the pool's log line."""
    if exc.errno == errno.ENOMEM:
        limit = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
        shown = "unlimited" if limit == resource.RLIM_INFINITY else f"{limit // 1024} KiB"
        return (
            f"{exc.strerror}: RLIMIT_MEMLOCK is used up (ulimit -l: {shown}, shared by all of "
            f"this user's workers, ~{max(1, round(pages * PAGE / 2**20))} MiB each)"
        )
    if exc.errno in (errno.EPERM, errno.ENOSYS, errno.EACCES):
        return f"{exc.strerror}: io_uring is disabled here (sysctl or seccomp)"
    return str(exc.strerror)
