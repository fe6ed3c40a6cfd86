"""Problems as the sandbox reads them (``sandbox/problems.py``): HumanEval's ``check`` rewritten
to top-level asserts."""

from __future__ import annotations

from common.datasets import humaneval_tests
from sandbox.trusted import testplan


def test_humaneval_check_is_rewritten_to_top_level_asserts():
    tests = humaneval_tests(
        "def check(candidate):\n    assert candidate(1) == 2\n"
        "    x = 3\n    assert candidate(x) == 4\n",
        "inc",
    )
    assert tests[0] == "assert inc(1) == 2"
    assert testplan.plan_test(tests[0]).form == "compare"
    assert "x = 3" in tests[1] and testplan.plan_test(tests[1]).form == "exec"
