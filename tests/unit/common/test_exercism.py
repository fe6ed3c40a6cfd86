"""Exercism's Python exercises (``../shared/data/exercism-python/``) through the checker a user
runs, ``python -m sandbox.check --canonical``: each a ``test_module`` problem, its unittest
module run in the tests' own process, every reference passing but those listed with why; and
a wrong program that patches the test runner or looks for the expected values still fails."""

from __future__ import annotations

import json

import pytest

from common.datasets import DatasetError, load_dataset
from common.exercism import read_test_module
from common.types import Verdict
from sandbox.check import main as check
from sandbox.trusted.pool import SandboxPool
from tests.conftest import REPO_ROOT
from tests.unit.sandbox.helpers import CONFIG, EXERCISM_EXCLUDED

EXERCISES = REPO_ROOT.parent / "shared" / "data" / "exercism-python"


def test_every_reference_passes_but_the_excluded_ones(tmp_path, capsys):
    out = tmp_path / "results.jsonl"
    args = ["--problems", str(EXERCISES), "--canonical", "--out", str(out), "--timeout-s", "60"]
    assert check(args) == 0  # a generous limit: killer-sudoku-helper's tests take ~4 s here
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    failing = {row["task_id"] for row in rows if not row["passed"]}
    # each excluded one does fail: the list says what is missing
    assert failing == EXERCISM_EXCLUDED
    assert len(rows) == 140
    err = capsys.readouterr().err
    assert "2196 of them code run in a process of their own, 0 judged in the program's" in err


def test_each_test_method_is_a_test_and_the_imports_become_the_programs_names():
    setup, cases = read_test_module(
        "import unittest\nimport hangman as h\nfrom hangman import (Hangman, STATUS as S)\n"
        "class HangmanTest(unittest.TestCase):\n    def test_one(self):\n"
        "        self.assertEqual(h.Hangman('a').status, S)\n    def helper(self):\n        pass\n",
        "hangman",
    )
    assert cases == [("HangmanTest", "test_one")]
    assert "Hangman = __program__('Hangman')" in setup and "S = __program__('STATUS')" in setup
    assert "Hangman('a').status" in setup and "import hangman" not in setup
    (problem,) = [p for p in load_dataset(EXERCISES, "all") if p.problem_id == "exercism/acronym"]
    assert problem.kind == "test_module" and problem.entry_point == "acronym.py"
    assert problem.tests[0] == "__judge__('AcronymTest', 'test_basic')"


CHEATS = {
    "patches the test runner": """
        import sys, unittest
        unittest.TestCase.assertEqual = lambda *a, **k: None
        unittest.TestResult.addFailure = lambda *a, **k: None
        def abbreviate(words):
            return ""
    """,
    "searches its process for the expected value": """
        import gc, sys
        def abbreviate(words):
            wanted = "P" + "NG"
            frame = sys._getframe(1)  # its callers'
            while frame is not None:
                if wanted in repr(frame.f_locals) or wanted in frame.f_code.co_consts:
                    return wanted
                frame = frame.f_back
            found = any(type(o) is str and o == wanted for o in gc.get_objects())
            return wanted if found else ""
    """,
}


@pytest.mark.parametrize("cheat", CHEATS, ids=list(CHEATS))
def test_a_wrong_program_that_cheats_fails_every_test(cheat):
    import textwrap

    (problem,) = [p for p in load_dataset(EXERCISES, "all") if p.problem_id == "exercism/acronym"]
    with SandboxPool(CONFIG) as pool:
        (result,) = pool.run([problem.job(textwrap.dedent(CHEATS[cheat]))])
    assert result.verdict is Verdict.FAILED and result.tests_passed == 0, result


def test_a_folder_without_tests_is_refused_in_one_line(tmp_path):
    folder = tmp_path / "two-fer"
    (folder / ".meta").mkdir(parents=True)
    (folder / ".meta" / "example.py").write_text("def two_fer(name='you'):\n    return name\n")
    with pytest.raises(DatasetError, match=r"two-fer: no test module two_fer_test\.py"):
        load_dataset(tmp_path, "all")
