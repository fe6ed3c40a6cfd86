"""Throughput of the pool against one fresh ``python`` process per sample, in the same run.

python -m bench.sandbox --problems ../shared/data/mbpp.jsonl --limit 300 --workers 2

The baseline is what people do without a pool: write program + setup + tests to a file and
run ``python FILE`` (site imports and all), ``--workers`` at a time. The pool runs the same
jobs with its cache off (every job would be distinct anyway) and the same parallelism.

Two comparisons are printed. Over every sample, throughput is bounded by the slowest single
sample: MBPP task 123's reference solution computes for ~2.4 s by itself, identical under
either executor, so 300 samples can never take less than ~2.4 s of wall time however cheap an
execution is. The second comparison leaves out the samples that run for more than
``--long-ms`` on their own (found from the first pool run, named in the output) and so
measures what the pool exists to remove: the cost per execution. It is repeated
``--rounds`` times, pool and subprocesses alternating, and the median ratio is printed: on a
shared machine other jobs' load changes from second to second, and alternating exposes both
sides to it alike.

Before the runs it lists what the baseline interpreter imports at start-up from outside the
standard library (``.pth`` hooks of the environment), with the time each took: such a hook is
paid by every baseline execution and inflates the speed-up. An editable install of this
project once did exactly that, and more than doubled the baseline's start-up time
(docs/benchmarks.md, sandbox section).

Each round also runs the pool on empty programs (``pass``, no tests) and prints the *ceiling*:
that rate over the round's subprocess rate, the speed-up the pool would reach if the programs
themselves cost nothing. A gap between the target and the ceiling is the pool's fixed cost
per execution (fork, harness, protocol), not the programs'; no change to how programs run can
close it.

Each side also reports the CPU time it spent per execution, summed over this process and every
process under it (the pool's workers, zygotes and children; the subprocesses): unlike the rate,
it does not depend on how much of each execution was spent waiting, so it moves less with the
machine's state and shows what each execution really costs.

Last, the pool's CPU and minor page faults per execution by role, for the samples and for
empty programs: the front (this process), the servers, the zygotes and the executions' own
processes. Where the fixed cost sits decides what could still be made cheaper.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

from common.arguments import positive_float, positive_int
from common.config import SandboxConfig
from common.types import ExecutionJob, ExecutionResult
from sandbox.isolated.reaping import descendants
from sandbox.problems import CheckProblem, ProblemFileError, load_problems
from sandbox.trusted import testplan
from sandbox.trusted.pool import SandboxIsolationError, SandboxPool

EMPTY_PROGRAMS = 200  # enough CPU (~0.4 s) for the clock-tick counters to be well above zero
EMPTY_JOB = ExecutionJob(code="pass", tests=())  # the pool's fixed cost per execution, alone
# The MBPP file the docs use: ``shared/data/mbpp.jsonl`` beside the checkout (the directory that
# holds it), found from this file so the bench runs from any working directory.
DEFAULT_PROBLEMS = str(Path(__file__).resolve().parents[3] / "shared" / "data" / "mbpp.jsonl")


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


def startup_imports(importtime_log: str) -> list[tuple[str, float]]:
    """The outermost modules outside the standard library in a ``-X importtime`` log, with
    their cumulative import time in ms (nested imports are counted in their importer's)."""
    entries = []
    for line in importtime_log.splitlines():
        fields = line.split("|")
        if len(fields) != 3 or not line.startswith("import time:"):
            continue
        try:
            cumulative_us = int(fields[1])
        except ValueError:
            continue  # the header line
        name = fields[2].rstrip()
        depth = (len(name) - len(name.lstrip())) // 2
        entries.append((depth, name.strip(), cumulative_us / 1000))
    found, ancestors = [], []  # ancestors: (depth, outside the stdlib or under such a module)
    for depth, name, ms in reversed(entries):  # the log lists children before their importer
        while ancestors and ancestors[-1][0] >= depth:
            ancestors.pop()
        under_outside = any(outside for _, outside in ancestors)
        outside = name.split(".")[0] not in sys.stdlib_module_names
        if outside and not under_outside:
            found.append((name, ms))
        ancestors.append((depth, outside or under_outside))
    return found[::-1]


def importtime_log(code: str = "pass") -> str:
    """What ``python -X importtime -c CODE`` reports: every import of its start-up and run."""
    argv = [sys.executable, "-X", "importtime", "-c", code]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False).stderr


def baseline_startup() -> str:
    """One line on what ``python`` imports at start-up beyond the standard library."""
    found = startup_imports(importtime_log())
    listed = ", ".join(f"{name} ({ms:.1f} ms)" for name, ms in found) or "nothing"
    return f"baseline start-up imports from outside the standard library: {listed}"


def tree_cpu_seconds() -> float:
    """CPU time (user + system) of this process and of every process under it, including
    what the ones already reaped used (Linux ``/proc``; clock-tick resolution)."""
    below = sum(
        int(value) for fields in descendants(os.getpid()).values() for value in fields[11:15]
    )  # utime stime cutime cstime
    return sum(os.times()[:4]) + below / os.sysconf("SC_CLK_TCK")


ROLES = ("front", "server", "zygote", "child")


def role_costs() -> dict[str, tuple[float, int]]:
    """CPU seconds and minor page faults so far of the pool's processes, by role: ``front``
    (this process), ``server`` (its children, the workers), ``zygote`` (theirs) and
    ``child`` (every execution's processes, from what the zygotes reaped)."""
    me, below = os.getpid(), descendants(os.getpid())
    tick = os.sysconf("SC_CLK_TCK")
    own = resource.getrusage(resource.RUSAGE_SELF)
    costs = {"front": [own.ru_utime + own.ru_stime, own.ru_minflt]}
    costs.update({role: [0.0, 0] for role in ROLES[1:]})
    # /proc/<pid>/stat after the command name: [1] parent, [7] minflt, [8] cminflt,
    # [11] utime, [12] stime, [13] cutime, [14] cstime (the c- fields: reaped children)
    for fields in below.values():
        parent = int(fields[1])
        if parent == me:
            role = "server"
        elif parent in below and int(below[parent][1]) == me:
            role = "zygote"
            costs["child"][0] += (int(fields[13]) + int(fields[14])) / tick
            costs["child"][1] += int(fields[8])
        else:
            continue  # an execution still running: counted once its zygote reaps it
        costs[role][0] += (int(fields[11]) + int(fields[12])) / tick
        costs[role][1] += int(fields[7])
    return {role: (cpu, faults) for role, (cpu, faults) in costs.items()}


class _Run(NamedTuple):
    latencies_ms: list[float]
    seconds: float
    cpu_seconds: float


def _timed(run: Callable[[], list[float]]) -> _Run:
    """Run ``run`` (it returns per-execution latencies) and measure its wall and CPU time."""
    cpu, start = tree_cpu_seconds(), time.perf_counter()
    latencies = run()
    return _Run(latencies, time.perf_counter() - start, tree_cpu_seconds() - cpu)


def _run_pool(pool: SandboxPool, jobs: list[ExecutionJob]) -> tuple[list[ExecutionResult], _Run]:
    results: list[ExecutionResult] = []

    def run() -> list[float]:
        results.extend(pool.run(jobs))
        return [r.duration_ms for r in results]

    return results, _timed(run)


def by_role(pool: SandboxPool, jobs: list[ExecutionJob]) -> str:
    """Run ``jobs`` through the pool; each role's CPU and minor page faults per execution."""
    before = role_costs()
    pool.run(jobs)
    after = role_costs()
    parts = []
    for role in ROLES:
        cpu_ms = (after[role][0] - before[role][0]) * 1000 / len(jobs)
        faults = (after[role][1] - before[role][1]) / len(jobs)
        parts.append(f"{role} {cpu_ms:.2f} ms ({faults:.0f} faults)")
    return ", ".join(parts)


def _run_subprocesses(jobs: list[ExecutionJob], workers: int) -> _Run:
    with tempfile.TemporaryDirectory() as directory, ThreadPoolExecutor(workers) as ex:
        return _timed(lambda: list(ex.map(lambda job: _subprocess_once(job, directory), jobs)))


def _summary(name: str, run: _Run) -> tuple[float, float]:
    """Print one side's line; returns (executions/s, CPU ms per execution)."""
    latencies = sorted(run.latencies_ms)
    rate = len(latencies) / run.seconds
    cpu_ms = run.cpu_seconds * 1000 / len(latencies)
    p50 = latencies[len(latencies) // 2]
    p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
    print(
        f"  {name:<12} {rate:8.1f} executions/s   p50 {p50:7.1f} ms   p99 {p99:7.1f} ms"
        f"   cpu {cpu_ms:6.2f} ms/execution"
    )
    return rate, cpu_ms


class _Round(NamedTuple):
    speed_up: float
    cpu_ratio: float  # CPU per execution, subprocess / pool
    ceiling: float  # pool rate on empty programs / subprocess rate; nan when not measured


def _compare(
    pool: SandboxPool, jobs: list[ExecutionJob], workers: int, empty: int = 0
) -> tuple[list[ExecutionResult], _Round]:
    """Pool, then subprocesses, over the same jobs, then (``empty`` > 0) the pool on that many
    empty programs; prints every side and returns the pool's results and the ratios."""
    results, pool_run = _run_pool(pool, jobs)
    naive_run = _run_subprocesses(jobs, workers)
    print(f"  pool passed {sum(r.passed for r in results)}/{len(results)}")
    pool_rate, pool_cpu = _summary("pool", pool_run)
    naive_rate, naive_cpu = _summary("subprocess", naive_run)
    cpu_ratio = naive_cpu / pool_cpu if pool_cpu else float("inf")
    print(f"  speed-up: {pool_rate / naive_rate:.1f}x   cpu per execution: {cpu_ratio:.1f}x less")
    ceiling = float("nan")
    if empty:
        _, empty_run = _run_pool(pool, [EMPTY_JOB] * empty)
        empty_rate, _ = _summary("pool, empty", empty_run)
        ceiling = empty_rate / naive_rate
        print(f"  ceiling: {ceiling:.1f}x (the speed-up if the programs cost nothing)")
    return results, _Round(pool_rate / naive_rate, cpu_ratio, ceiling)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.sandbox",
        description="Throughput of the sandbox pool against one fresh python process per "
        "sample, on the same reference solutions (MBPP by default).",
        epilog="--stdio: stdin/stdout judging on the Kick Start packages instead "
        "(python -m bench.sandbox --stdio --help)",
    )
    parser.add_argument(
        "--problems",
        default=DEFAULT_PROBLEMS,
        help="a problems file with reference solutions (MBPP, LeetCodeDataset...); default: "
        "shared/data/mbpp.jsonl beside the checkout, here %(default)s",
    )
    parser.add_argument(
        "--only-split",
        action="store_true",
        help="only problems with a test that is code, which the pool runs in a process of its "
        "own beside the program's (LeetCode's linked lists and trees)",
    )
    parser.add_argument(
        "--limit",
        type=positive_int,
        default=300,
        help="the first N problems (default: %(default)s)",
    )
    parser.add_argument(
        "--workers",
        type=positive_int,
        default=2,
        help="pool workers, and subprocesses at a time (default: %(default)s)",
    )
    parser.add_argument(
        "--long-ms",
        type=positive_float,
        default=1000.0,
        help="rounds leave out samples that ran longer alone (default: %(default)s)",
    )
    parser.add_argument(
        "--rounds", type=positive_int, default=3, help="alternating rounds (default: %(default)s)"
    )
    parser.add_argument(
        "--no-pin", action="store_true", help="sandbox.pin_hot_pages = false (for comparison)"
    )
    parser.add_argument(
        "--no-cgroup",
        action="store_true",
        help="the memory layer's fallback (fork and memfd refused) even where a cgroup could "
        "be had, for its cost (docs/sandbox.md)",
    )
    parser.add_argument(
        "--cpu-affinity",
        choices=("auto", "none"),
        default="auto",
        help="sandbox.cpu_affinity (default: %(default)s)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """All samples once, then ``--rounds`` alternating rounds without the long ones.

    A problems file that is missing or malformed, or a kernel that allows the pool too little
    isolation, ends with a one-line error and exit status 2.
    """
    args = _parser().parse_args(argv)
    if not os.path.isfile(args.problems):
        print(f"error: no problems file at {args.problems}; give --problems FILE", file=sys.stderr)
        return 2
    try:
        problems = list(load_problems(args.problems).values())
        if args.only_split:  # jobs whose tests run in a process of their own
            problems = [p for p in problems if _split(p)]
        _bench(args, problems[: args.limit])
    except (ProblemFileError, SandboxIsolationError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def _split(problem: CheckProblem) -> bool:
    """Whether the pool runs the problem's tests apart from the program (a test that is code,
    ``sandbox/isolated/split.py``); the baseline runs them in its one process, as before."""
    forms = (testplan.plan_test(test, problem.setup_code).form for test in problem.tests)
    return problem.stdio is None and "exec" in forms


def _bench(args: argparse.Namespace, problems: list[CheckProblem]) -> None:
    jobs = [p.reference_job() for p in problems]
    config = SandboxConfig(
        num_workers=args.workers,
        timeout_s=10,
        test_timeout_s=10,
        cache=False,
        cpu_affinity=args.cpu_affinity,
        pin_hot_pages=not args.no_pin,
    )
    print(f"{len(jobs)} reference solutions, {args.workers} workers, {os.cpu_count()} CPUs")
    print(baseline_startup())
    with SandboxPool(config, cgroup=not args.no_cgroup) as pool:
        print(
            f"pool isolation: {pool.isolation}+{pool.memory_layer}; result cache off; "
            f"workers' CPUs: {pool.cpus}"
        )
        print(f"pool {pool.pinning}; {pool.zygote_loop}")
        print("all samples:")
        results, _ = _compare(pool, jobs, args.workers)
        long = {i for i, r in enumerate(results) if r.duration_ms > args.long_ms}
        names = [f"{problems[i].task_id} ({results[i].duration_ms:.0f} ms)" for i in sorted(long)]
        left_out = ", ".join(names) or "none"
        print(f"without samples that run > {args.long_ms:.0f} ms alone: {left_out}")
        short = [job for i, job in enumerate(jobs) if i not in long]
        rounds = []
        for round_ in range(args.rounds):
            print(f"round {round_ + 1}/{args.rounds}:")
            rounds.append(_compare(pool, short, args.workers, EMPTY_PROGRAMS)[1])
        speed_up, cpu_ratio, ceiling = (statistics.median(column) for column in zip(*rounds))
        print(
            f"median speed-up without them: {speed_up:.1f}x"
            f" (cpu per execution: {cpu_ratio:.1f}x less; ceiling: {ceiling:.1f}x)"
        )
        print("pool CPU by role, per execution (one more run of each):")
        print(f"  samples: {by_role(pool, short)}")
        print(f"  empty:   {by_role(pool, [EMPTY_JOB] * EMPTY_PROGRAMS)}")
