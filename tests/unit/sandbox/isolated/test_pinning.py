"""Pinned hot pages (sandbox/isolated/pinning.py): the kernel behaviour they rely on, the
calibration that finds them, and the pool with them on, off and refused."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import textwrap

from bench.sandbox.throughput import role_costs
from common.config import SandboxConfig
from common.types import ExecutionJob
from sandbox.trusted.pool import SandboxPool
from tests.conftest import REPO_ROOT
from tests.unit.sandbox.helpers import CONFIG, F_TESTS, GOOD_F, run

# Run in a fresh interpreter: a pin marks the whole process (every later fork of it checks
# for pinned pages), and a stopped or killed child must not be pytest's.
PRELUDE = """
import json, mmap, os, signal
from sandbox.isolated import pinning
PAGE = pinning.PAGE
area = mmap.mmap(-1, 8 * PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
area.write(b"x" * 8 * PAGE)  # every page present
import ctypes
start = ctypes.addressof(ctypes.c_char.from_buffer(area))
pages = [start + i * PAGE for i in range(8)]
"""


def _script(body: str) -> dict:
    code = PRELUDE + textwrap.dedent(body)
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=REPO_ROOT,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_pinned_page_is_copied_at_fork_and_an_unpinned_one_stays_shared():
    """What pinning is for: the kernel gives the child its own copy of a pinned page at fork
    (no fault on the first write), and shares the others until one side writes."""
    result = _script(
        """
        ring = pinning.pin(pages[2:4])
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # no write here: only the fork can have made a page ours alone
            held = pinning.pages_with("self", [(pages[0], pages[7] + PAGE)], pinning.EXCLUSIVE)
            os.write(write, json.dumps([pages.index(p) for p in sorted(held)]).encode())
            os._exit(0)
        os.waitpid(pid, 0)
        print(json.dumps({"child_alone": json.loads(os.read(read, 4096)), "ring": ring}))
        """
    )
    assert result["ring"] > 2
    assert result["child_alone"] == [2, 3]


def test_calibration_finds_the_pages_its_child_wrote():
    result = _script(
        """
        def child():
            for i in (1, 3, 6):
                area[i * PAGE] = 0x79
            os.kill(os.getpid(), signal.SIGSTOP)
        found = set(pinning.calibrate(child))
        print(json.dumps({"ours": [i for i, p in enumerate(pages) if p in found]}))
        """
    )
    assert result["ours"] == [1, 3, 6]


def test_calibration_of_a_child_that_does_not_stop_finds_nothing():
    result = _script(
        """
        def child():
            area[0] = 0x79  # then returns: calibrate's child exits without stopping
        print(json.dumps({"found": len(pinning.calibrate(child))}))
        """
    )
    assert result["found"] == 0


def _child_faults(pool: SandboxPool, jobs: list[ExecutionJob]) -> float:
    before = role_costs()["child"][1]
    assert all(r.passed for r in pool.run(jobs))
    return (role_costs()["child"][1] - before) / len(jobs)


def test_pinned_zygotes_children_fault_far_less():
    """Minor faults per execution, from what the zygotes reaped: ~300 without the pin,
    ~100 with it (~65 of which read library text, which no pin avoids)."""
    jobs = [ExecutionJob(GOOD_F, F_TESTS)] * 40
    faults = {}
    for pin in (True, False):
        with SandboxPool(CONFIG.model_copy(update={"pin_hot_pages": pin})) as pool:
            assert all(pool.pinned_pages) is pin
            _child_faults(pool, jobs[:5])  # the first executions of a worker are not typical
            faults[pin] = _child_faults(pool, jobs)
    assert faults[True] < 0.6 * faults[False], faults


def test_pool_reports_pinned_pages(tmp_path):
    with SandboxPool(CONFIG) as pool:
        assert all(100 < n < 2000 for n in pool.pinned_pages), pool.pinned_pages
        assert pool.pinning.startswith("hot pages pinned: [")
        assert pool.stats()["sandbox/pinned_frac"] == 1.0
    off = SandboxConfig(num_workers=1, cache=False, pin_hot_pages=False)
    with SandboxPool(off) as pool:
        assert pool.pinned_pages == [0]
        assert pool.pinning == "hot pages not pinned (sandbox.pin_hot_pages = false)"
        assert pool.stats()["sandbox/pinned_frac"] == 0.0
        assert run(pool, GOOD_F).passed


def test_without_locked_memory_nothing_is_pinned_and_the_pool_says_why():
    """io_uring counts pinned pages against RLIMIT_MEMLOCK: with none left the zygote runs
    unpinned, and the log line names the limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    resource.setrlimit(resource.RLIMIT_MEMLOCK, (0, hard))  # the workers inherit it
    try:
        pool = SandboxPool(SandboxConfig(num_workers=1, cache=False))
    finally:
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (soft, hard))
    with pool:
        assert pool.pinned_pages == [0]
        assert "not pinned" in pool.pinning and "RLIMIT_MEMLOCK" in pool.pinning
        assert run(pool, GOOD_F).passed


def test_a_program_sees_no_io_uring_descriptor():
    """The zygote keeps the ring open (the pin lasts as long as it does); a child closes every
    descriptor but its own before the program runs: these tests are code (a generator's
    bound name), so the program's process holds stdout, stderr and its two call pipes
    (``sandbox/isolated/split.py``), and no value pipe."""
    code = """
        import os
        def links():
            paths = [f"/proc/self/fd/{fd}" for fd in os.listdir("/proc/self/fd")]
            return [os.readlink(path) for path in paths if os.path.lexists(path)]
    """
    tests = (
        "assert sum('pipe:' in link for link in links()) == 4",  # stdout, stderr, 2 calls
        "assert not any('io_uring' in link for link in links())",
    )
    with SandboxPool(SandboxConfig(num_workers=1, cache=False)) as pool:
        assert pool.pinned_pages[0] > 0
        result = run(pool, code, tests)
    assert result.passed, result
