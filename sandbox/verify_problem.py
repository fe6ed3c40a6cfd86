"""Check that the judge gives a problem package's labelled submissions their labels.

    python -m sandbox.verify_problem PACKAGE_DIR [--workers N]

What problemtools' ``verifyproblem`` does for submissions, with its rules (docs/sandbox.md,
"Labelled submissions"): every Python 3, C and C++ program under ``submissions/<label>/`` runs
on every test through the pool, under a time limit found from the ``accepted`` ones
(:func:`time_rules`). Exit status 0 when every judged submission got its label, 1 when one did
not, 2 for a package that cannot be read.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from common.arguments import positive_int
from common.config import SandboxConfig
from common.packages import PackageError, Skipped, load_package
from common.types import ExecutionJob, ExecutionResult, Problem, Verdict
from sandbox.trusted.pool import SandboxIsolationError, SandboxPool

EXTENSIONS = {".py": "python", ".c": "c", ".cc": "cpp", ".cpp": "cpp", ".cxx": "cpp"}
LABELS = ("accepted", "wrong_answer", "time_limit_exceeded", "run_time_error")
LABEL_OF = {
    Verdict.PASSED: "accepted",
    Verdict.FAILED: "wrong_answer",
    Verdict.TIMEOUT: "time_limit_exceeded",
    Verdict.RUNTIME_ERROR: "run_time_error",
    Verdict.MEMORY_LIMIT: "run_time_error",
    Verdict.OUTPUT_LIMIT: "output_limit_exceeded",
    Verdict.SYNTAX_ERROR: "compile_error",
    Verdict.INFRA_ERROR: "judge_error",
}
AMPLE_S = 60.0  # the accepted submissions' limit while the time limit is being found


@dataclass(frozen=True)
class Submission:
    """A labelled program: ``submissions/<label>/<file>``, in a language judged here."""

    path: Path
    label: str
    language: str


@dataclass(frozen=True)
class Judged:
    """What the judge made of a submission: its verdict as a label, its slowest test."""

    submission: Submission
    verdict: str
    slowest_s: float
    detail: str


def submissions(package: Path) -> tuple[list[Submission], list[tuple[Path, str]]]:
    """The package's programs this tool judges, and the others with why they are skipped."""
    found: list[Submission] = []
    skipped: list[tuple[Path, str]] = []
    for label_dir in sorted(p for p in (package / "submissions").glob("*") if p.is_dir()):
        for path in sorted(label_dir.iterdir()):
            why = _skip_reason(path, label_dir.name)
            if why:
                skipped.append((path, why))
            else:
                found.append(Submission(path, label_dir.name, EXTENSIONS[path.suffix]))
    return found, skipped


def _skip_reason(path: Path, label: str) -> str | None:
    if path.is_dir():
        return "a submission of several files"
    if label not in LABELS:
        return f"label {label} has no single verdict to check"
    if path.suffix not in EXTENSIONS:
        return f"language of {path.suffix or 'a file without extension'} not judged here"
    if path.suffix == ".py" and "python2" in path.read_text(errors="replace").partition("\n")[0]:
        return "Python 2"
    return None


def time_rules(package: Path) -> tuple[float, float]:
    """The package's time multiplier and safety margin (problemtools' defaults)."""
    config = yaml.safe_load((package / "problem.yaml").read_text(encoding="utf-8")) or {}
    limits = config.get("limits") or {}
    if "time_multipliers" in limits or config.get("problem_format_version"):
        multipliers = limits.get("time_multipliers") or {}
        ac = multipliers.get("ac_to_time_limit", 2.0)
        return float(ac), float(multipliers.get("time_limit_to_tle", 1.5))
    return float(limits.get("time_multiplier", 5)), float(limits.get("time_safety_margin", 2))


def judge(
    pool: SandboxPool, problem: Problem, programs: list[Submission], limit_s: float
) -> list[Judged]:
    """Every program on every test, one job per test (each test's time is its own)."""
    spec = problem.stdio
    tests = spec.in_run_order()
    jobs = [
        ExecutionJob(
            program.path.read_text(errors="surrogateescape"),
            (),
            stdio=replace(spec, tests=(test,), time_limit_s=limit_s),
            language=program.language,
        )
        for program in programs
        for test in tests
    ]
    results = pool.run(jobs)
    judged = []
    for k, program in enumerate(programs):
        mine = results[k * len(tests) : (k + 1) * len(tests)]
        judged.append(_verdict(program, mine))
    return judged


def _verdict(program: Submission, results: list[ExecutionResult]) -> Judged:
    slowest = max(r.duration_ms for r in results) / 1000
    failed = next((r for r in results if not r.passed), None)
    if failed is None:
        return Judged(program, "accepted", slowest, "")
    return Judged(program, LABEL_OF[failed.verdict], slowest, failed.detail)


def verify(package: Path, workers: int) -> int:
    """Judge every submission, print one line each and a summary; the exit status."""
    loaded = load_package(package, package.resolve().name)
    if isinstance(loaded, Skipped):
        print(f"{package}: not judged: {loaded.reason}")
        return 0
    programs, skipped = submissions(package)
    multiplier, margin = time_rules(package)
    memory_mb = loaded.stdio.memory_mb or SandboxConfig().memory_mb
    config = SandboxConfig(num_workers=workers, cache=False, memory_mb=memory_mb)
    with SandboxPool(config) as pool:
        accepted = [p for p in programs if p.label == "accepted"]
        first = judge(pool, loaded, accepted, AMPLE_S)
        slowest = max((j.slowest_s for j in first if j.verdict == "accepted"), default=0.0)
        exact = slowest * multiplier
        limit_s = loaded.stdio.time_limit_s or max(1, int(0.5 + exact))
        margin_s = max(limit_s + 1, int(0.5 + exact * margin))  # problemtools' rounding
        how = "the package's" if loaded.stdio.time_limit_s else f"{multiplier:g} x that, rounded"
        print(f"time limit {limit_s:g} s ({how}; slowest accepted test {slowest:.3f} s)")
        others = [p for p in programs if p.label != "accepted"]
        judged = judge(pool, loaded, programs, margin_s)
    judged = [_over_time(j, limit_s) for j in judged]
    wrong = [j for j in judged if j.verdict != j.submission.label]
    for j in judged:
        mark = "ok" if j.verdict == j.submission.label else f"MISMATCH: got {j.verdict}"
        where = j.submission.path.relative_to(package)
        print(f"  {where}: {mark} ({j.slowest_s:.3f} s){f'; {j.detail}' if j in wrong else ''}")
    for path, why in skipped:
        print(f"  {path.relative_to(package)}: skipped ({why})")
    print(
        f"{len(judged) - len(wrong)} of {len(judged)} submissions got their label "
        f"({len(others)} not accepted), {len(skipped)} skipped"
    )
    return 1 if wrong else 0


def _over_time(judged: Judged, limit_s: float) -> Judged:
    """A program that passed a test in more than the time limit (but within the margin it ran
    under) exceeded the limit, as problemtools reads it."""
    if judged.verdict == "accepted" and judged.slowest_s > limit_s:
        return replace(judged, verdict="time_limit_exceeded")
    return judged


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sandbox.verify_problem", description=__doc__.split("\n")[0]
    )
    parser.add_argument("package", type=Path, help="a problem package (a directory)")
    parser.add_argument(
        "--workers", type=positive_int, default=2, help="pool workers (default: %(default)s)"
    )
    args = parser.parse_args(argv)
    if not (args.package / "problem.yaml").is_file():
        print(f"error: {args.package}: no problem.yaml (not a problem package)", file=sys.stderr)
        return 2
    try:
        return verify(args.package, args.workers)
    except (PackageError, SandboxIsolationError, yaml.YAMLError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
