"""An execution's memory and processes are bounded however it allocates them, with a cgroup
where the pool can make one and by the stated fallback where it cannot
(``sandbox/trusted/cgroups.py``, docs/sandbox.md).

Both paths run here, as root and as the ordinary user of
``test_the_pool_suite_passes_as_an_ordinary_user`` (whose pytest runs in a cgroup made theirs,
standing in for systemd's delegation): the cgroup path in a pool that found one, the fallback
in a pool started with ``cgroup=False``. Each pool has one worker, so every program lands on
the worker the previous one reached. The attack suite (``test_attacks.py``) holds the
memory attacks that count what a program held from its own report; here the cgroup's own
peak is the witness.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from common.types import Verdict
from sandbox.trusted import cgroups, host
from sandbox.trusted.pool import SandboxPool
from tests.unit.sandbox.helpers import CONFIG, GOOD_F, run

MEMORY_MB = 256
BOUND = int(MEMORY_MB * 1.1) << 20
FALLBACK = "no-cgroup(fork refused, memfd refused)"

FORKED = """
import os, time

def f(x):
    '''8 children that each touch 100 MiB and hold it a moment: how many ended well.'''
    pids = []
    for _ in range(8):
        pid = os.fork()
        if pid == 0:
            block = bytearray(100 << 20)
            for i in range(0, len(block), 4096):
                block[i] = 1
            time.sleep(0.3)
            os._exit(0)
        pids.append(pid)
    return sum(os.waitpid(pid, 0)[1] == 0 for pid in pids)
"""
MEMFDS = """
import os

def f(x):
    '''400 MiB in memfds of 10 MiB (under RLIMIT_FSIZE), kept open.'''
    chunk, fds = b"\\x01" * (1 << 20), []
    for _ in range(40):
        fds.append(os.memfd_create("m"))
        for _ in range(10):
            os.write(fds[-1], chunk)
    return x + 1
"""
PROCESSES = """
import os, signal

def f(x):
    '''How many processes it can start (each pauses until killed).'''
    pids = []
    try:
        while len(pids) < 200:
            pid = os.fork()
            if pid == 0:
                signal.pause()
                os._exit(0)
            pids.append(pid)
    except OSError:
        pass
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    return len(pids)
"""
FORK_BOMB = """
import os, time

def f(x):
    '''Every process forks for a second; then all but the first leave.'''
    first, end = os.getpid(), time.monotonic() + 1
    while time.monotonic() < end:
        try:
            os.fork()
        except OSError:
            pass
    if os.getpid() != first:
        os._exit(0)
    return x + 1
"""
THREADS = """
import threading

def f(x):
    done = []
    threads = [threading.Thread(target=lambda: done.append(bytearray(1 << 20))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return len(done)
"""


def _cgroup_expected() -> bool:
    """Whether this process may make groups under its own memory cgroup (as root on these
    machines, or a user whose group was delegated): then the pool must have found one."""
    with open("/proc/self/cgroup") as f, open("/proc/self/mountinfo") as g:
        found = cgroups.find_hierarchies(f.read(), g.read())
    memory = [h for h in found if "memory" in h.controllers or h.version == 2]
    return any(os.access(h.own, os.W_OK) for h in memory[:1])


@pytest.fixture(scope="module")
def cgroup_pool():
    config = {"num_workers": 1, "memory_mb": MEMORY_MB, "timeout_s": 20.0, "test_timeout_s": 15.0}
    with SandboxPool(CONFIG.model_copy(update=config)) as pool:
        if pool.memory_layer == FALLBACK:
            if _cgroup_expected():
                pytest.fail("the pool found no cgroup where this process may make one")
            pytest.skip("no cgroup here: the fallback's tests below still run")
        yield pool


@pytest.fixture(scope="module")
def fallback_pool():
    config = {"num_workers": 1, "memory_mb": MEMORY_MB, "timeout_s": 20.0, "test_timeout_s": 15.0}
    with SandboxPool(CONFIG.model_copy(update=config), cgroup=False) as pool:
        yield pool


def _peak(pool: SandboxPool) -> int:
    (peak,) = pool.memory_peaks()
    return peak or 0


def test_the_cgroup_is_named_and_made_per_worker(cgroup_pool):
    assert cgroup_pool.memory_layer in ("cgroup(memory,pids)", "cgroup(memory)")
    assert f"+{cgroup_pool.memory_layer}; " in cgroup_pool.describe()
    assert cgroup_pool.stats()["sandbox/memory_cgroup"] == 1.0
    for directory in cgroup_pool._cgroups.worker(0).dirs:
        assert os.path.basename(directory) == "worker-0" and os.path.isdir(directory)


def test_forked_children_hold_no_more_than_memory_mb(cgroup_pool):
    _peak(cgroup_pool)
    result = run(cgroup_pool, FORKED, tests=("assert f(1) == 8",))
    assert result.verdict in (Verdict.MEMORY_LIMIT, Verdict.FAILED), result
    assert 0 < _peak(cgroup_pool) <= BOUND
    assert run(cgroup_pool, GOOD_F).passed


def test_memfds_are_killed_at_memory_mb_and_judged_memory_limit(cgroup_pool):
    _peak(cgroup_pool)
    result = run(cgroup_pool, MEMFDS)
    assert result.verdict is Verdict.MEMORY_LIMIT, result
    assert 0 < _peak(cgroup_pool) <= BOUND
    assert run(cgroup_pool, GOOD_F).passed


def test_processes_are_bounded_and_a_fork_bomb_passes_the_pool_by(cgroup_pool):
    counted = run(cgroup_pool, PROCESSES, tests=("assert f(1) < 64",))
    assert counted.passed, counted
    bomb = run(cgroup_pool, FORK_BOMB, tests=("assert f(1) == 2",))
    assert bomb.verdict in (Verdict.PASSED, Verdict.TIMEOUT, Verdict.MEMORY_LIMIT), bomb
    assert run(cgroup_pool, GOOD_F).passed


def test_closing_removes_the_groups_and_a_dead_pools_groups_go_with_the_next_start():
    config = CONFIG.model_copy(update={"num_workers": 1})
    with SandboxPool(config) as pool:
        if pool._cgroups is None:
            pytest.skip("no cgroup here")
        dirs = [*pool._cgroups.dirs, *pool._cgroups.worker(0).dirs]
        place = os.path.dirname(pool._cgroups.dirs[0])
    assert not [d for d in dirs if os.path.exists(d)]
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    dead_pid = int(gone.stdout)
    stale = os.path.join(place, f"{cgroups.PREFIX}{host.pid_namespace()}-{dead_pid}-0")
    os.makedirs(os.path.join(stale, "worker-0"))
    with SandboxPool(config):
        assert not os.path.exists(stale)


def test_the_fallback_is_named(fallback_pool):
    assert fallback_pool.memory_layer == FALLBACK
    assert f"+{FALLBACK}; " in fallback_pool.describe()
    assert fallback_pool.stats()["sandbox/memory_cgroup"] == 0.0


def test_the_fallback_refuses_a_second_process_and_memfds(fallback_pool):
    for code in (FORKED, MEMFDS):
        result = run(fallback_pool, code, tests=("assert f(1) == 2",))
        assert result.verdict is Verdict.RUNTIME_ERROR, result
        assert "PermissionError" in result.detail, result
    assert run(fallback_pool, PROCESSES, tests=("assert f(1) == 0",)).passed
    spawn = "import subprocess\ndef f(x):\n    return subprocess.run(['true']).returncode\n"
    assert run(fallback_pool, spawn, tests=("assert f(1) == 0",)).verdict is Verdict.RUNTIME_ERROR
    assert run(fallback_pool, GOOD_F).passed


def test_the_fallback_keeps_threads_and_counts_the_scratch_against_memory_mb(fallback_pool):
    assert run(fallback_pool, THREADS, tests=("assert f(1) == 4",)).passed
    # RLIMIT_AS holds memory_mb - 64 MiB (the scratch tmpfs): 200 MiB no longer fits
    heap = "def f(x):\n    return len(bytearray(200 << 20))\n"
    assert run(fallback_pool, heap, tests=("assert f(1) > 0",)).verdict is Verdict.MEMORY_LIMIT
    assert run(fallback_pool, GOOD_F).passed
