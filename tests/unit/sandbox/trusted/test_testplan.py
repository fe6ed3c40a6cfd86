"""Test plans (``sandbox/trusted/testplan.py``): which form each test takes, so the expected
values never reach the program, and which names a split job asks the program for."""

from __future__ import annotations

from sandbox.trusted import testplan


def test_plan_compare_form_never_sends_expected_to_child():
    plan = testplan.plan_test("assert f([1, 2]) == [2, 1]")
    assert plan.form == "compare" and plan.child["exprs"] == ["f([1, 2])"]
    assert "[2, 1]" not in repr(plan.child)


def test_plan_calls_form_for_isclose_and_not():
    plan = testplan.plan_test("assert math.isclose(area(2), 12.56, rel_tol=0.01)", "import math")
    assert plan.form == "calls" and plan.child["exprs"] == ["area(2)"]
    assert testplan.judge(plan, [12.566])
    assert testplan.plan_test("assert not is_even(3)").form == "calls"


def test_plan_falls_back_to_exec_for_loops_and_globals():
    assert testplan.plan_test("for i in range(3): assert f(i) == i").form == "exec"
    assert testplan.plan_test("assert all(f(i) for i in range(3))").form == "exec"
    assert testplan.plan_test("assert obj.ready").form == "exec"
    assert testplan.plan_test("assert obj.value + 1 == 2").form == "compare"


def test_shadowed_builtin_belongs_to_candidate():
    code = "def sum(a, b):\n    return a + b\n"
    shadowed = testplan.shadowed_names(code, ("assert sum(1, 2) == 3",))
    assert shadowed == {"sum"}
    assert testplan.plan_test("assert sum(1, 2) == 3", "", shadowed).form == "compare"


def test_a_split_job_asks_the_program_only_for_the_names_nothing_else_binds():
    header = "from typing import *\nfrom math import *\nclass ListNode:\n    pass\n"
    header += "def list_node(values):\n    return ListNode()\n"
    tests = ("assert is_same(Solution().f(list_node([1]), k=inf), [x for x in range(3)])",)
    assert testplan.program_names(header, tests) == ["Solution", "is_same"]
    module = "import unittest\nfrom os import path as p\nclass T(unittest.TestCase):\n"
    module += "    def test_a(self):\n        self.assertEqual(abbreviate(p.sep), 'X')\n"
    assert testplan.program_names(module, ()) == ["abbreviate"]
