"""Repair tasks from injected bugs: ``python -m launch.selfplay.make_repairs``.

    python -m launch.selfplay.make_repairs --problems ../shared/data/mbpp.jsonl --out repairs.jsonl

For every problem with a reference solution, the operators of ``launch.selfplay.mutations``
rewrite one place of the reference at a time; a mutant becomes a repair task only when the
sandbox says it is a valid bug (the rule of ``launch.selfplay.repairs``, which the self-play
saboteur's bugs follow too), and normalised duplicates are dropped. Up to ``--per-problem`` bugs
are kept per problem, spread over the operators and chosen by ``--seed``.

Each task is a row of the generic JSONL format (docs/datasets.md) with ``source_task_id``,
``buggy_program`` and ``operator`` besides; a completion-style problem's tasks keep its
``program_prefix``, which the fix continues. docs/selfplay.md has the rest.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from common.arguments import OutputPathError, check_output_file, non_negative_int, positive_int
from common.config import SandboxConfig
from common.config.sandbox import ISOLATION_LEVELS, MIN_ISOLATION_HELP
from common.datasets import FORMATS, DatasetError, load_dataset
from common.help_format import DefaultsHelpFormatter
from common.types import Problem
from launch.selfplay.mutations import OPERATORS, count_sites, mutate, normalised
from launch.selfplay.repairs import (
    BugJudge,
    Execute,
    function_problems_only,
    reference_program,
    repair_prompt,
)
from sandbox.trusted.pool import SandboxIsolationError, SandboxPool

#: Mutants checked in the sandbox per bug wanted: most candidates are kept, some are not bugs.
CANDIDATES_PER_BUG = 4
#: The column a rejected mutant is counted in, by its check's status (the rest: ``invalid``).
REJECTED = {"infra_error": "infra_error", "still_passes": "still_passes"}


def candidates(source: str, count: int, seed: str) -> list[tuple[str, str]]:
    """Up to ``count`` distinct ``(operator, mutant)`` of ``source``, round robin over the
    operators in a seeded order, each operator's sites in a seeded order; mutants that do not
    compile or repeat the source or another mutant are skipped."""
    rng = random.Random(seed)
    queues = []
    for operator in OPERATORS:
        sites = list(range(count_sites(source, operator)))
        rng.shuffle(sites)
        queues.append((operator, sites))
    rng.shuffle(queues)
    seen = {normalised(source)}
    chosen: list[tuple[str, str]] = []
    while len(chosen) < count and any(sites for _, sites in queues):
        for operator, sites in queues:
            if not sites or len(chosen) >= count:
                continue
            mutant = mutate(source, operator, sites.pop())
            try:
                compile(mutant, "<mutant>", "exec")
                key = normalised(mutant)
            except (SyntaxError, ValueError):
                continue
            if key not in seen:
                seen.add(key)
                chosen.append((operator, mutant))
    return chosen


def _program(problem: Problem, code: str) -> str:
    return f"{problem.setup_code}\n{code}" if problem.setup_code else code


def make_repairs(
    problems: Sequence[Problem],
    execute: Execute,
    per_problem: int,
    seed: int,
    quota: Mapping[str, int] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Counter]]:
    """The repair rows and, per operator, counts of kept and rejected candidates (with the
    reason). ``execute(jobs, stop_at_first_failure)`` is the sandbox. ``quota`` overrides
    ``per_problem`` by problem id (``launch.selfplay`` aims more bugs at weaker problems; a
    problem missing from it gets none)."""
    wanted = {p.problem_id: per_problem for p in problems} if quota is None else dict(quota)
    counts: dict[str, Counter] = {op: Counter() for op in OPERATORS}
    usable = [
        p for p in problems if p.reference_solution.strip() and wanted.get(p.problem_id, 0) > 0
    ]
    judge = BugJudge(execute)
    references = judge.references(usable)
    pending: list[tuple[Problem, str, str]] = []
    for problem, result in zip(usable, references, strict=True):
        if not result.passed:
            continue  # a reference that fails its own tests cannot say what a bug is
        for operator, mutant in candidates(
            reference_program(problem),
            wanted[problem.problem_id] * CANDIDATES_PER_BUG,
            f"{seed}/{problem.problem_id}",
        ):
            pending.append((problem, operator, mutant))
    checks = judge.check([(problem, mutant) for problem, _, mutant in pending])
    rows: list[dict[str, Any]] = []
    kept: Counter = Counter()
    for (problem, operator, mutant), check in zip(pending, checks, strict=True):
        if not check.valid:
            counts[operator][REJECTED.get(check.status, "invalid")] += 1
        elif kept[problem.problem_id] >= wanted[problem.problem_id]:
            counts[operator]["surplus"] += 1
        else:
            counts[operator]["kept"] += 1
            kept[problem.problem_id] += 1
            rows.append({
                "id": f"{problem.problem_id}/repair/{kept[problem.problem_id]}",
                "prompt": repair_prompt(problem, mutant, check.result),
                "tests": list(problem.tests),
                "setup_code": problem.setup_code,
                "reference_solution": problem.reference_solution,
                "source_task_id": problem.problem_id,
                "buggy_program": _program(problem, mutant),
                "operator": operator,
            })  # fmt: skip
            if problem.program_prefix:  # the fix continues the original header
                rows[-1]["program_prefix"] = problem.program_prefix
    return rows, counts


def format_counts(counts: dict[str, Counter], rows: list[dict], problems: int) -> str:
    lines = ["operator          kept  still passes  invalid  surplus  infra"]
    for operator, c in counts.items():
        lines.append(
            f"{operator:<16} {c['kept']:>5}  {c['still_passes']:>12}  {c['invalid']:>7}  "
            f"{c['surplus']:>7}  {c['infra_error']:>5}"
        )
    covered = len({row["source_task_id"] for row in rows})
    lines.append(
        f"{len(rows)} repair tasks; {covered}/{problems} problems "
        f"({covered / max(problems, 1):.1%}) have at least one"
    )
    return "\n".join(lines)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        formatter_class=DefaultsHelpFormatter,
        prog="python -m launch.selfplay.make_repairs",
        description="Repair tasks from bugs injected into reference solutions.",
    )
    parser.add_argument("--problems", required=True, help="problems file with references")
    parser.add_argument("--out", required=True, help="the repair tasks (generic JSONL)")
    parser.add_argument("--split", default=None, help="e.g. train; default: every row")
    parser.add_argument("--format", default="auto", choices=FORMATS)
    parser.add_argument("--per-problem", type=positive_int, default=3, help="bugs kept per problem")
    parser.add_argument(
        "--limit", type=non_negative_int, default=0, help="only the first N problems; 0: all"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=positive_int, default=2, help="sandbox workers")
    parser.add_argument(
        "--min-isolation",
        choices=ISOLATION_LEVELS,
        default=ISOLATION_LEVELS[0],
        help=MIN_ISOLATION_HELP,
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        out = check_output_file(args.out, "--out")  # before the samples run, not after
        problems = load_dataset(args.problems, args.split, args.format, args.limit)
        function_problems_only(problems, args.problems)
        config = SandboxConfig(num_workers=args.workers, min_isolation=args.min_isolation)
        with SandboxPool(config) as pool:

            def execute(jobs, stop_at_first_failure):
                return pool.run(jobs, stop_at_first_failure=stop_at_first_failure)

            rows, counts = make_repairs(problems, execute, args.per_problem, args.seed)
    except (DatasetError, OutputPathError, SandboxIsolationError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    print(format_counts(counts, rows, len(problems)))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
