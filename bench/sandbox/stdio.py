"""Stdin/stdout judging: the pool against one fresh ``python`` process per test, in one run.

python -m bench.sandbox --stdio --workers 2

Every Kick Start package (``shared/data/codejam/kickstart`` beside the checkout) gets one
program that reads all its input and prints the test's own answer from a table keyed by a
fingerprint of the input (its length and last bytes; unique per problem, checked): every test
passes with an output of exactly the answer's size, so what is timed is judging a whole program
(start, input through a pipe, output back, comparison), not a solution's work. A digest would
need an import, a program's own work (zlib's costs a pool execution ~0.6 ms, a quarter of its
cost). A result that is not ``passed`` ends the bench. The pool runs one job per problem, every
test at once; the baseline runs ``python FILE`` per test on its input, ``--workers`` at a time,
and compares its stdout with the pool's validator and the test's flags. They alternate for
``--rounds`` rounds (a shared machine's load moves from second to second; alternating exposes
both to it alike), each printing wall time and CPU per test (this process and all under it, as
``bench.sandbox.throughput`` counts it), then the pool on programs that read an empty input and
print nothing: the *ceiling*, the speed-up if judging cost nothing but the execution. The CPU
of each of the pool's roles closes the bench.

First, one test with an ``--answer-mb`` answer (numbered lines; the answer a file, which the
front reads in chunks) runs twice: the rise of the front's RSS (its peak mark reset before),
then its peak Python allocations (``tracemalloc``, which slows the comparison some tenfold:
that run is not timed), each as a multiple of the answer's size.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

from bench.sandbox.throughput import EMPTY_PROGRAMS, baseline_startup, by_role, tree_cpu_seconds
from common.answer_flags import AnswerFlags
from common.arguments import positive_float, positive_int
from common.config import SandboxConfig
from common.packages import PackageError, load_packages
from common.types import ExecutionJob, ExecutionResult, Problem, StdioSpec, StdioTest, Verdict
from sandbox.trusted.answers import compare_bytes
from sandbox.trusted.pool import SandboxIsolationError, SandboxPool

DEFAULT_PACKAGES = str(Path(__file__).resolve().parents[3] / "shared/data/codejam/kickstart")
MB, MIB = 1_000_000, 1024 * 1024
TAIL = 64  # the input's last bytes in its fingerprint
TABLE_PROGRAM = (
    "import sys\nANSWERS = {table!r}\ndata = sys.stdin.buffer.read()\n"
    f"sys.stdout.buffer.write(ANSWERS[len(data), data[-{TAIL}:]])\n"
)
EMPTY_JOB = ExecutionJob(  # the pool's fixed cost of one test, alone
    "import sys\nsys.stdin.buffer.read()\n", (), stdio=StdioSpec((StdioTest("empty", b"", b""),))
)
LINES_PER_WRITE = 10_000  # ~80 kB per write: neither side builds the large answer whole
LINES_PROGRAM = (
    "import sys\nsys.stdin.buffer.read()\n"
    "for start in range(0, {lines}, {block}):\n"
    "    stop = min(start + {block}, {lines})\n"
    "    sys.stdout.buffer.write(''.join([f'{{i}}\\n' for i in range(start, stop)]).encode())\n"
)
LARGE_TIME_LIMIT_S = 60.0  # writing 50 MB from Python takes seconds on a slow, shared VM


def table_program(problem: Problem) -> str:
    """A program that prints each test's answer for that test's input, so that it passes
    every test with an output of exactly the answer's size."""
    table: dict[tuple[int, bytes], tuple[bytes, bytes]] = {}
    for test in problem.stdio.tests:
        data, answer = _bytes(test.input), _bytes(test.answer)
        key = len(data), data[-TAIL:]
        if table.setdefault(key, (data, answer)) != (data, answer):
            raise ValueError(
                f"{problem.problem_id}: test {test.name}'s input has the length and last "
                f"{TAIL} bytes of another test's, with another input or answer; the table "
                "program could not tell them apart"
            )
    return TABLE_PROGRAM.format(table={key: answer for key, (_, answer) in table.items()})


def _bytes(data: bytes | Path) -> bytes:
    return data.read_bytes() if isinstance(data, Path) else data


def large_answer_job(directory: str, size: int) -> tuple[ExecutionJob, int]:
    """A job whose one test has an answer of at least ``size`` bytes, written to a file in
    pieces (the front's peak RSS must not be raised before it is measured), and a program
    printing the same bytes; returns the job and the answer's exact size."""
    path, lines, written = Path(directory) / "large.ans", 0, 0
    with open(path, "wb") as answer:
        while written < size:
            stop = lines + LINES_PER_WRITE
            written += answer.write("".join([f"{i}\n" for i in range(lines, stop)]).encode())
            lines = stop
    program = LINES_PROGRAM.format(lines=lines, block=LINES_PER_WRITE)
    test = StdioTest("large", b"1\n", path)
    spec = StdioSpec((test,), LARGE_TIME_LIMIT_S, output_mb=math.ceil(written / MIB) + 1)
    return ExecutionJob(program, (), stdio=spec), written


def _require_passed(results: list[ExecutionResult], names: list[str]) -> None:
    """Every timed test must pass: a failure means the bench timed something else."""
    for name, result in zip(names, results, strict=True):
        if result.verdict is not Verdict.PASSED:
            raise RuntimeError(f"{name}: {result.verdict.value}: {result.detail}")


def large_answer_memory(pool: SandboxPool, size_mb: float) -> str:
    """Run the large-answer test twice (see the module docstring); one line with the first
    run's time and RSS rise and the second's peak Python allocations."""
    with tempfile.TemporaryDirectory() as directory:
        job, size = large_answer_job(directory, int(size_mb * MB))
        reset = _reset_peak_rss()
        rss_before = _rss_kib()
        start = time.perf_counter()
        _require_passed(pool.run([job]), ["the large answer"])
        seconds = time.perf_counter() - start
        rise = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) * 1024
        tracemalloc.start()
        try:
            _require_passed(pool.run([job]), ["the large answer, traced"])
            allocated = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    bound = "" if reset else " (an upper bound: the kernel's peak mark could not be reset)"
    return (
        f"large answer: {size / MB:.1f} MB, passed in {seconds:.1f} s; the front's peak RSS "
        f"{rise / MB:.1f} MB above its RSS before ({rise / size:.2f}x the answer){bound}, its "
        f"peak Python allocations {allocated / MB:.1f} MB ({allocated / size:.2f}x)"
    )


def _reset_peak_rss() -> bool:
    """Lower the kernel's peak-RSS mark (``ru_maxrss``) to the current RSS (Linux 4.0+), so
    that the next reading is the peak from now on, not an earlier one; False where refused."""
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
    except OSError:
        return False
    return True


def _rss_kib() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


class _Side(NamedTuple):
    seconds: float
    cpu_seconds: float
    tests: int


def _pool_side(pool: SandboxPool, jobs: list[ExecutionJob], names: list[str]) -> _Side:
    cpu, start = tree_cpu_seconds(), time.perf_counter()
    results = pool.run(jobs)
    side = _Side(time.perf_counter() - start, tree_cpu_seconds() - cpu, 0)
    _require_passed(results, names)
    return side._replace(tests=sum(r.tests_total for r in results))


def _baseline_test(path: str, test: StdioTest) -> bool:
    """One test the naive way: a fresh interpreter, then the same comparison as the pool's."""
    done = subprocess.run(
        [sys.executable, path], input=_bytes(test.input), capture_output=True, timeout=60
    )
    flags = AnswerFlags.parse(test.flags)
    return done.returncode == 0 and compare_bytes(done.stdout, _bytes(test.answer), flags).accepted


def _baseline_side(cases: list[tuple[str, StdioTest]], workers: int) -> _Side:
    cpu, start = tree_cpu_seconds(), time.perf_counter()
    with ThreadPoolExecutor(workers) as ex:
        passed = list(ex.map(lambda case: _baseline_test(*case), cases))
    side = _Side(time.perf_counter() - start, tree_cpu_seconds() - cpu, len(cases))
    failed = [f"{path}: test {test.name}" for (path, test), ok in zip(cases, passed) if not ok]
    if failed:
        raise RuntimeError(f"the baseline failed {len(failed)} tests, first {failed[0]}")
    return side


def _line(name: str, side: _Side) -> tuple[float, float]:
    """Print one side; returns its (wall ms, CPU ms) per test."""
    wall_ms, cpu_ms = (s * 1000 / side.tests for s in (side.seconds, side.cpu_seconds))
    print(
        f"  {name:<11} {side.tests:4d} tests in {side.seconds:6.2f} s: {wall_ms:6.2f} ms/test"
        f"   cpu {cpu_ms:6.2f} ms/test   all passed"
    )
    return wall_ms, cpu_ms


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.sandbox",
        description="Stdin/stdout judging: the sandbox pool against one fresh python process "
        "per test on the Kick Start packages, alternating for --rounds rounds, and the front's "
        "memory with an answer of --answer-mb MB.",
    )
    parser.add_argument("--stdio", action="store_true", help="selects this bench")
    parser.add_argument(
        "--packages",
        default=DEFAULT_PACKAGES,
        help="a directory of problem packages; default: shared/data/codejam/kickstart beside "
        "the checkout, here %(default)s",
    )
    parser.add_argument(
        "--workers",
        type=positive_int,
        default=2,
        help="pool workers, and subprocesses at a time (default: %(default)s)",
    )
    parser.add_argument("--rounds", type=positive_int, default=3, help="(default: 3)")
    parser.add_argument("--answer-mb", type=positive_float, default=50.0, help="(default: 50)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """The large answer, then ``--rounds`` alternating rounds over every test.

    A packages directory that is missing or malformed, or a kernel that allows the pool too
    little isolation, ends with a one-line error and exit status 2.
    """
    args = _parser().parse_args(argv)
    if not os.path.isdir(args.packages):
        print(f"error: no directory at {args.packages}; give --packages DIR", file=sys.stderr)
        return 2
    try:
        problems, skipped = load_packages(args.packages)
        print(
            f"{sum(p.num_tests for p in problems)} tests of {len(problems)} packages "
            f"({len(skipped)} skipped) in {args.packages}, {args.workers} workers, "
            f"{os.cpu_count()} CPUs"
        )
        _bench(args, problems)
    except (PackageError, SandboxIsolationError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def _bench(args: argparse.Namespace, problems: list[Problem]) -> None:
    programs = [table_program(p) for p in problems]
    jobs = [ExecutionJob(code, (), stdio=p.stdio) for code, p in zip(programs, problems)]
    print(baseline_startup())
    config = SandboxConfig(num_workers=args.workers, cache=False)
    with SandboxPool(config) as pool, tempfile.TemporaryDirectory() as directory:
        print(f"pool isolation: {pool.isolation}+{pool.memory_layer}; result cache off")
        print(large_answer_memory(pool, args.answer_mb))
        cases = []
        for index, (code, problem) in enumerate(zip(programs, problems)):
            Path(directory, f"p{index}.py").write_text(code)
            cases.extend((os.path.join(directory, f"p{index}.py"), t) for t in problem.stdio.tests)
        rounds = []
        for round_ in range(args.rounds):
            print(f"round {round_ + 1}/{args.rounds}:")
            rounds.append(_round(pool, jobs, problems, cases, args.workers))
        print("pool CPU by role, per test (one more run of each):")
        print(f"  tests: {by_role(pool, _one_test_each(jobs))}")
        print(f"  empty: {by_role(pool, [EMPTY_JOB] * EMPTY_PROGRAMS)}")
    speed_up, cpu_ratio, ceiling = (statistics.median(column) for column in zip(*rounds))
    low, high = min(r[0] for r in rounds), max(r[0] for r in rounds)
    print(
        f"median speed-up: {speed_up:.1f}x (rounds {low:.1f}-{high:.1f}x; cpu per test: "
        f"{cpu_ratio:.1f}x less; ceiling: {ceiling:.1f}x)"
    )


def _round(
    pool: SandboxPool, jobs: list[ExecutionJob], problems: list[Problem], cases: list, workers: int
) -> tuple[float, float, float]:
    """Pool, subprocesses, then the pool on empty programs; prints each, and returns the
    speed-up, the CPU ratio and the ceiling."""
    pool_ms, pool_cpu = _line("pool", _pool_side(pool, jobs, [p.problem_id for p in problems]))
    naive_ms, naive_cpu = _line("subprocess", _baseline_side(cases, workers))
    empty = [EMPTY_JOB] * EMPTY_PROGRAMS
    empty_ms, _ = _line("pool, empty", _pool_side(pool, empty, ["empty"] * len(empty)))
    speed_up, cpu_ratio = naive_ms / pool_ms, naive_cpu / pool_cpu if pool_cpu else math.inf
    print(f"  speed-up: {speed_up:.1f}x   cpu per test: {cpu_ratio:.1f}x less")
    print(f"  ceiling: {naive_ms / empty_ms:.1f}x (the speed-up if judging cost nothing else)")
    return speed_up, cpu_ratio, naive_ms / empty_ms


def _one_test_each(jobs: list[ExecutionJob]) -> list[ExecutionJob]:
    """The same executions, one job per test, so that a cost per job is one per test."""
    return [
        dataclasses.replace(job, stdio=dataclasses.replace(job.stdio, tests=(test,)))
        for job in jobs
        for test in job.stdio.tests
    ]
