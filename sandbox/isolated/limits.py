"""What bounds an execution's process: its rlimits, the uid it runs as, and glibc's malloc set
up so that RLIMIT_AS measures what a program uses and a fork copies no idle heap.

The server computes each execution's limits (:func:`rlimits`, from the zygote's
:func:`virtual_size` and :func:`address_space_mb`); the child sets them and drops to the
sandbox uid (:func:`drop_privileges`) before its program runs. Where the front made the worker
an execution cgroup (``sandbox/trusted/cgroups.py``), the cgroup bounds the execution's memory
and processes and the server reads its OOM-kill counter (:class:`OomKills`); where it could not,
RLIMIT_AS is the bound, of one process (the child's seccomp filter refuses a second one, and
memfds).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal

from sandbox.isolated.scratch import SCRATCH_MB
from sandbox.isolated.syscalls import PR_SET_PDEATHSIG, libc, prctl

MAX_PROCESSES = 64  # also the execution cgroup's pids.max (sandbox/trusted/cgroups.py)
MAX_OPEN_FILES = 64
MIN_ADDRESS_SPACE_MB = 16  # what the harness needs beyond the zygote's mappings, and more


def address_space_mb(memory_mb: int, cgroup: bool) -> int:
    """How much an execution may map beyond the zygote's address space (RLIMIT_AS's part).

    With a cgroup, ``memory_mb``: the group bounds what the execution holds, and this limit
    only turns a single huge allocation into a ``MemoryError`` (judged ``memory_limit``)
    before the group's OOM killer would. Without one, RLIMIT_AS is the bound: the child is
    one process (fork refused; threads share its address space) with no memfd, but the
    scratch tmpfs it may fill is memory too, so ``memory_mb - SCRATCH_MB``, and at least
    :data:`MIN_ADDRESS_SPACE_MB` (the bound is then that plus the scratch).
    """
    if cgroup:
        return memory_mb
    return max(memory_mb - SCRATCH_MB, MIN_ADDRESS_SPACE_MB)


class OomKills:
    """The execution cgroup's OOM-kill counter (``oom_kill`` in v1's ``memory.oom_control``
    or v2's ``memory.events``), through a read-only descriptor the front opened: the worker's
    view has no ``/sys``. Read after each execution: its group runs one execution at a time,
    so a rise is that execution's. ``fd`` -1 (no cgroup): never rises."""

    def __init__(self, fd: int) -> None:
        self.fd, self.seen = fd, 0
        self.seen = self._read()

    def _read(self) -> int:
        if self.fd < 0:
            return 0
        try:
            data = os.pread(self.fd, 512, 0)
            at = data.index(b"\noom_kill ") + 10
            return int(data[at : data.index(b"\n", at)])
        except (OSError, ValueError):
            return self.seen  # unreadable: no rise claimed

    def rose(self) -> bool:
        """Whether the counter rose since the last call (or since it was made)."""
        now = self._read()
        rose, self.seen = now > self.seen, now
        return rose


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


def virtual_size(pid: int | str = "self") -> int:
    """A process's address space in bytes: a child it forks starts with this much mapped."""
    with open(f"/proc/{pid}/status", "rb") as f:
        for line in f:
            if line.startswith(b"VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


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
