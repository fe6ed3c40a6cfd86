"""What bounds an execution's process: its rlimits, the uid it runs as, and glibc's malloc set
up so that RLIMIT_AS measures what a program uses and a fork copies no idle heap.

The server computes each execution's limits (:func:`rlimits`, from the zygote's
:func:`virtual_size`); the child sets them and drops to the sandbox uid
(:func:`drop_privileges`) before its program runs.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal

from sandbox.isolated.syscalls import PR_SET_PDEATHSIG, libc, prctl

MAX_PROCESSES = 64
MAX_OPEN_FILES = 64


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
