"""Check completions (or the reference solutions) against MBPP / HumanEval problems, or the
stdin/stdout problems of a directory of Kattis problem packages.

    python -m sandbox.check --problems PROBLEMS.jsonl --samples SAMPLES.jsonl --out RESULTS.jsonl
    python -m sandbox.check --problems PROBLEMS.jsonl --canonical --out RESULTS.jsonl
    python -m sandbox.check --problems PACKAGES_DIR --samples SAMPLES.jsonl --out RESULTS.jsonl

One output row per sample, in input order: the sample's fields plus ``passed``, ``verdict``,
``tests_passed`` and ``tests_total``. User mistakes end with a one-line error and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys

from common.arguments import OutputPathError, check_output_file, positive_float, positive_int
from common.config import SandboxConfig
from common.datasets import read_rows
from sandbox.problems import CheckProblem, ProblemFileError, load_problems
from sandbox.trusted.pool import SandboxIsolationError, SandboxPool

BATCH = 64


def _samples(args: argparse.Namespace, problems: dict[str, CheckProblem]) -> list[dict]:
    if args.canonical:
        missing = [p.task_id for p in problems.values() if not p.reference.strip()]
        if missing:  # an empty program fails every test: "0 passed" would blame the tests
            raise ProblemFileError(
                f"--canonical: {args.problems} has no reference solution in {len(missing)} of "
                f"its {len(problems)} rows (task {missing[0]} first); give --samples to check "
                "completions against its tests"
            )
        return [{"task_id": p.task_id, "completion": p.reference} for p in problems.values()]
    if not args.samples:
        raise ProblemFileError("--samples is required unless --canonical is given")
    samples = []
    for number, row in read_rows(args.samples):
        where = f"{args.samples}:{number}"
        if "task_id" not in row or "completion" not in row:
            raise ProblemFileError(f"{where}: a sample needs 'task_id' and 'completion'")
        if str(row["task_id"]) not in problems:
            raise ProblemFileError(f"{where}: unknown task_id {row['task_id']!r}")
        if not isinstance(row["completion"], str):
            raise ProblemFileError(f"{where}: 'completion' must be a string")
        samples.append(row)
    return samples


def run_check(args: argparse.Namespace) -> int:
    out = check_output_file(args.out, "--out")  # before the samples run, not after
    problems = load_problems(args.problems)
    samples = _samples(args, problems)
    config = SandboxConfig(
        num_workers=args.workers, timeout_s=args.timeout_s, test_timeout_s=args.timeout_s
    )
    out_rows = []
    with SandboxPool(config) as pool:
        print(f"sandbox: {args.workers} workers, isolation {pool.isolation}", file=sys.stderr)
        for start in range(0, len(samples), BATCH):
            batch = samples[start : start + BATCH]
            jobs = [problems[str(s["task_id"])].job(s["completion"]) for s in batch]
            for sample, result in zip(batch, pool.run(jobs)):
                out_rows.append(
                    {
                        **sample,
                        "passed": result.passed,
                        "verdict": result.verdict.value,
                        "tests_passed": result.tests_passed,
                        "tests_total": result.tests_total,
                    }
                )
            done = len(out_rows)
            passed = sum(r["passed"] for r in out_rows)
            print(f"\r{done}/{len(samples)} checked, {passed} passed", end="", file=sys.stderr)
        split = int(pool.stats()["sandbox/tests_split"])
    print(file=sys.stderr)
    total = sum(r["tests_total"] for r in out_rows)  # a test that is code runs apart from it:
    print(  # no test is judged in the program's own process (docs/sandbox.md)
        f"tests: {total}, {split} of them code run in a process of their own, "
        "0 judged in the program's process",
        file=sys.stderr,
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r) + "\n" for r in out_rows), encoding="utf-8")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sandbox.check", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--problems",
        required=True,
        help="MBPP or HumanEval rows (JSONL or JSON array), or a directory of problem packages",
    )
    parser.add_argument(
        "--samples", help="JSONL rows with task_id and completion (needed unless --canonical)"
    )
    parser.add_argument("--out", required=True, help="where to write the results (JSONL)")
    parser.add_argument(
        "--timeout-s",
        type=positive_float,
        default=10.0,
        help="wall-clock limit per sample, and per test (a package's own time limit wins for "
        "its tests; default: %(default)s)",
    )
    parser.add_argument(
        "--workers", type=positive_int, default=2, help="pool workers (default: %(default)s)"
    )
    parser.add_argument("--canonical", action="store_true", help="check the reference solutions")
    args = parser.parse_args(argv)
    try:
        return run_check(args)
    except (OutputPathError, ProblemFileError, SandboxIsolationError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
