"""What bounds an execution's process: its rlimits, the uid it runs as, and glibc's malloc set
up so that RLIMIT_AS measures what a program uses and a fork copies no idle heap. Where the
worker has no execution cgroup, RLIMIT_AS of the one process is the memory bound
(docs/sandbox.md, "The memory layer").
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
    only turns one huge allocation into a ``MemoryError`` before the OOM killer would. Without
    one, RLIMIT_AS is the bound of the one process, and the scratch tmpfs it may fill is memory
    too: ``memory_mb - SCRATCH_MB``, at least :data:`MIN_ADDRESS_SPACE_MB`.
    """
    if cgroup:
        return memory_mb
    return max(memory_mb - SCRATCH_MB, MIN_ADDRESS_SPACE_MB)


class OomKills:
    """The execution cgroup's OOM-kill counter, through a descriptor the front opened (the view
    has no ``/sys``). Its group runs one execution at a time, so a rise is that execution's.
    ``fd`` -1 (no cgroup): never rises."""

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
    which clears it. Without it the parent must be a PID namespace's init, whose death kills
    the namespace. No-new-privileges is inherited from the worker."""
    if uid != os.geteuid():
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    if death_signal:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def single_malloc_arena() -> None:
    """Make threads share glibc's main malloc arena (``mallopt(M_ARENA_MAX, 1)``), in the
    worker, inherited: each extra arena reserves 64 MiB of address space, which RLIMIT_AS
    counts, and a child starting a few threads would fail long before it used ``memory_mb``."""
    with contextlib.suppress(AttributeError):
        libc.mallopt(ctypes.c_int(-8), ctypes.c_int(1))


def release_free_memory() -> None:
    """Give glibc's free heap pages back to the kernel (``malloc_trim(0)``), once before the
    zygote is forked: a resident page costs every fork and every exit, used or not."""
    with contextlib.suppress(AttributeError):  # not glibc
        libc.malloc_trim(ctypes.c_size_t(0))
