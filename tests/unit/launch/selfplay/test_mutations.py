"""Bugs by AST mutation: each operator by hand, and repair tasks from real MBPP problems whose
bugs the sandbox confirms (the reference passes, every kept mutant fails a test)."""

from __future__ import annotations

import json

import pytest

from launch.selfplay.mutations import OPERATORS, count_sites, mutate, normalised
from tests.conftest import REPO_ROOT

DATA = REPO_ROOT.parent / "shared" / "data"

SOURCE = """def f(xs, k):
    total = 0
    for i in range(len(xs)):
        if xs[i] < k:
            total += xs[i] * 2
    return max(total, k)
"""


@pytest.mark.parametrize(
    ("operator", "site", "changed"),
    [
        ("compare_swap", 0, "if xs[i] <= k:"),
        ("arith_swap", 0, "total -= xs[i] * 2"),  # the augmented += is met first
        ("arith_swap", 1, "total += xs[i] + 2"),
        ("off_by_one", 0, "for i in range(len(xs) + 1):"),
        ("off_by_one", 1, "for i in range(len(xs) - 1):"),
        ("wrong_variable", 0, "return max(i, k)"),  # breadth first: the return is met first
        ("drop_statement", 0, "def f(xs, k):\n    for i"),  # total = 0 is gone
        ("swap_arguments", 0, "return max(k, total)"),
        ("wrong_constant", 0, "total = 1"),
        ("negate_condition", 0, "if not xs[i] < k:"),
    ],
)
def test_each_operator_rewrites_the_site_it_names(operator, site, changed):
    mutant = mutate(SOURCE, operator, site)
    assert changed in mutant
    assert normalised(mutant) != normalised(SOURCE)
    compile(mutant, "<mutant>", "exec")


def test_sites_are_counted_and_every_one_is_reachable():
    counts = {op: count_sites(SOURCE, op) for op in OPERATORS}
    # 8 reads of the 4 variables x 3 others; range and 2 indices x (+1, -1); 3 droppable lines
    assert counts == {
        "compare_swap": 1, "arith_swap": 2, "off_by_one": 6, "wrong_variable": 24,
        "drop_statement": 3, "swap_arguments": 1, "wrong_constant": 2, "negate_condition": 1,
    }  # fmt: skip
    for operator, count in counts.items():
        mutants = {normalised(mutate(SOURCE, operator, site)) for site in range(count)}
        assert normalised(SOURCE) not in mutants
    with pytest.raises(IndexError):
        mutate(SOURCE, "negate_condition", 1)


def test_repairs_from_mbpp_are_bugs_the_sandbox_confirms(tmp_path, capsys):
    from common.config import SandboxConfig
    from common.datasets import load_dataset, parse_generic_row
    from launch.selfplay.make_repairs import main
    from sandbox.trusted.pool import SandboxPool

    out = tmp_path / "repairs.jsonl"
    argv = ["--problems", str(DATA / "mbpp.jsonl"), "--out", str(out), "--limit", "30",
            "--per-problem", "2", "--seed", "3"]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    covered = {row["source_task_id"] for row in rows}
    assert len(covered) >= 0.8 * 30 and "problems" in printed
    assert all(sum(r["source_task_id"] == t for r in rows) <= 2 for t in covered)
    assert len({row["operator"] for row in rows}) >= 6
    problems = {p.problem_id: p for p in load_dataset(DATA / "mbpp.jsonl", limit=30)}
    with SandboxPool(SandboxConfig(num_workers=2)) as pool:
        # checked again here, not taken from the tool: references pass, every bug fails a test
        tasks = [parse_generic_row(row, f"repairs.jsonl:{i}") for i, row in enumerate(rows)]
        references = pool.run([_job(t.tests, t.setup_code, t.reference_solution) for t in tasks])
        assert all(r.passed for r in references)
        bugs = pool.run([_job(t.tests, "", row["buggy_program"]) for t, row in zip(tasks, rows)])
        assert not any(r.passed for r in bugs)
    for row in rows:
        original = problems[row["source_task_id"]]
        assert row["tests"] == list(original.tests) and row["buggy_program"] in row["prompt"]
    assert main(argv) == 0  # reproducible by seed
    assert [json.loads(line) for line in out.read_text().splitlines()] == rows


def _job(tests, setup, code):
    from common.types import ExecutionJob

    return ExecutionJob(code, tuple(tests), setup)
