"""Throughput of the pool against one fresh ``python`` process per sample, in the same run.

python -m sandbox.bench --problems ../shared/data/mbpp.jsonl --limit 300 --workers 2
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from common.config import SandboxConfig
from common.types import ExecutionJob
from sandbox.pool import SandboxPool
from sandbox.problems import load_problems

DEFAULT_PROBLEMS = os.path.join(
    os.path.dirname(__file__), "..", "..", "shared", "data", "mbpp.jsonl"
)


def _subprocess_once(job: ExecutionJob, directory: str) -> float:
    """The naive baseline: write program + tests to a file and start an interpreter."""
    start = time.perf_counter()
    with tempfile.NamedTemporaryFile("w", suffix=".py", dir=directory, delete=False) as f:
        f.write("\n".join([job.code, job.setup_code, *job.tests]))
    try:
        subprocess.run(
            [sys.executable, f.name],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=30,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pass
    finally:
        os.unlink(f.name)
    return (time.perf_counter() - start) * 1000


def _summary(name: str, latencies: list[float], seconds: float) -> float:
    latencies = sorted(latencies)
    rate = len(latencies) / seconds
    p50 = latencies[len(latencies) // 2]
    p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
    print(f"{name:<12} {rate:8.1f} executions/s   p50 {p50:7.1f} ms   p99 {p99:7.1f} ms")
    return rate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox.bench")
    parser.add_argument("--problems", default=DEFAULT_PROBLEMS)
    parser.add_argument("--limit", type=int, default=300)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    problems = list(load_problems(args.problems).values())[: args.limit]
    jobs = [p.reference_job() for p in problems]
    config = SandboxConfig(num_workers=args.workers, timeout_s=10, test_timeout_s=10, cache=False)
    with SandboxPool(config) as pool:
        start = time.perf_counter()
        results = pool.run(jobs)
        pool_s = time.perf_counter() - start
        pool_latencies = [r.duration_ms for r in results]
        isolation = pool.isolation
    with tempfile.TemporaryDirectory() as directory, ThreadPoolExecutor(args.workers) as ex:
        start = time.perf_counter()
        naive = list(ex.map(lambda job: _subprocess_once(job, directory), jobs))
        naive_s = time.perf_counter() - start
    print(f"{len(jobs)} MBPP reference solutions, {args.workers} workers, {os.cpu_count()} CPUs")
    print(f"pool isolation: {isolation}; passed {sum(r.passed for r in results)}/{len(results)}")
    pool_rate = _summary("pool", pool_latencies, pool_s)
    naive_rate = _summary("subprocess", naive, naive_s)
    print(f"speed-up: {pool_rate / naive_rate:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
