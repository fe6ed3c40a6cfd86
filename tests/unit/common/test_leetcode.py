"""LeetCodeDataset (``../shared/data/leetcode/``, every file) through the checker a user runs,
``python -m sandbox.check --canonical``: each problem a ``class_method`` one, every reference
passes but those listed below, and a test built with the header's helpers runs in its own
process, never in the program's."""

from __future__ import annotations

import json
import re

import pytest

from common.datasets import DatasetError, load_dataset
from common.leetcode import parse_leetcode_row
from sandbox.check import main as check
from sandbox.trusted.pool import SandboxPool
from tests.conftest import REPO_ROOT
from tests.unit.sandbox.helpers import CONFIG, LEETCODE_EXCLUDED

DATA = REPO_ROOT.parent / "shared" / "data" / "leetcode"
FILES = sorted(DATA.glob("*.jsonl.gz"))
# References that fail here, and why: LEETCODE_EXCLUDED (checked: each failing one is in that
# list). Every other one passes: those that import ``sortedcontainers`` too, as on LeetCode
# (pyproject.toml).


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_every_reference_passes_but_the_excluded_ones(path, tmp_path, capsys):
    out = tmp_path / "results.jsonl"
    assert check(["--problems", str(path), "--canonical", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    failing = {row["task_id"] for row in rows if not row["passed"]}
    assert failing <= LEETCODE_EXCLUDED, failing - LEETCODE_EXCLUDED
    assert len(failing) <= 0.01 * len(rows)
    assert "0 judged in the program's process" in capsys.readouterr().err


def test_every_problem_is_a_class_method_with_a_difficulty():
    problems = [p for path in FILES for p in load_dataset(path)]
    assert len(problems) == 3835
    assert {p.kind for p in problems} == {"class_method"}
    assert {p.difficulty for p in problems} == {"Easy", "Medium", "Hard"}
    assert all("Solution()." in test for p in problems for test in p.tests)  # fresh each


def test_a_wrong_program_redefining_the_headers_helper_fails():
    """``is_same_list`` is the dataset's: a program that redefines it to agree with anything
    still fails, since the test runs where the program's names cannot reach it."""
    problems = [p for path in FILES for p in load_dataset(path)]
    problem = next(p for p in problems if p.problem_id == "leetcode/add-two-numbers")
    assert "is_same_list" in problem.tests[0]
    cheat = (
        "is_same_list = lambda a, b: True\nclass Solution:\n    def addTwoNumbers(self, l1, l2):\n"
    )
    cheat += "        return None\n"
    namespace: dict = {}  # where the test ran in the program's process, the cheat would pass
    exec(problem.program_prefix + cheat + problem.setup_code + cheat + problem.tests[0], namespace)
    right = problem.program_prefix + problem.reference_solution
    with SandboxPool(CONFIG) as pool:
        wrong, honest = pool.run([problem.job(problem.program_prefix + cheat), problem.job(right)])
    assert wrong.tests_passed == 0 and honest.passed


@pytest.mark.parametrize(
    "change, message",
    [
        ({"entry_point": "twoSum"}, "entry_point 'twoSum' is not Solution().<method>"),
        ({"test": "assert True"}, "test code has no check(candidate) function"),
        ({"query": None}, "missing field(s) query"),
    ],
)
def test_a_malformed_row_is_refused_in_one_line(change, message):
    row = {
        "task_id": "t", "query": "q", "prompt": "", "completion": "", "meta": {},
        "entry_point": "Solution().f",
        "test": "def check(candidate):\n    assert candidate(1) == 1",
    }  # fmt: skip
    row.update(change)
    row = {key: value for key, value in row.items() if value is not None}
    with pytest.raises(DatasetError, match=re.escape(f"rows.jsonl:3: {message}")):
        parse_leetcode_row(row, "rows.jsonl:3")
