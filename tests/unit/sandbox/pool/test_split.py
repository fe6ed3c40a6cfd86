"""Tests that are code run in a process of their own (``sandbox/isolated/split.py``): loops,
``check`` functions and tests built with the dataset's helpers pass for a right program and
fail for a wrong one, and a wrong program that patches the harness, looks for the test's
expected values in its own process, writes records or kills the tests' process still fails.
Through the real pool, under both zygote loops (and as an ordinary user:
``tests/unit/sandbox/test_escape.py`` runs this folder as one)."""

from __future__ import annotations

import textwrap

import pytest

from common.types import Verdict
from tests.unit.sandbox.helpers import run

SETUP = """
class ListNode:
    def __init__(self, val=0, next=None):
        self.val = val
        self.next = next

def list_node(values):
    head = None
    for value in reversed(values):
        head = ListNode(value, head)
    return head

def is_same_list(a, b):
    while a is not None and b is not None:
        if a.val != b.val:
            return False
        a, b = a.next, b.next
    return a is None and b is None
"""
LIST_TESTS = (
    "assert is_same_list(Solution().reverse(head=list_node([1, 2, 3])), list_node([3, 2, 1]))",
    "assert Solution().reverse(list_node([])) is None",
    "assert is_same_list(Solution().reverse(list_node(list(range(3000)))), "
    "list_node(list(range(2999, -1, -1))))",  # a long list crosses as a flat table
)
REVERSE = """
    class Solution:
        def reverse(self, head):
            previous = None
            while head:
                head.next, previous, head = previous, head, head.next
            return previous
"""
SECRET = 987654321  # in the tests only: a program that finds it could return it
LOOP_TESTS = (f"for x in range(3):\n    assert f(x) == x + {SECRET} - {SECRET} + 1",)


def test_a_right_program_passes_tests_built_with_the_datasets_helpers(pool):
    result = run(pool, REVERSE, LIST_TESTS, SETUP)
    assert result.verdict is Verdict.PASSED, result.detail


def test_a_wrong_program_fails_them(pool):
    wrong = REVERSE.replace("return previous", "return head")
    result = run(pool, wrong, LIST_TESTS, SETUP)
    assert result.test_verdicts[0] is Verdict.FAILED and result.verdict is Verdict.FAILED


def test_a_cycle_and_shared_nodes_cross_as_they_are(pool):
    tests = (
        "a = list_node([1, 2])\na.next.next = a\nassert Solution().length(a) == 2",
        "b = ListNode(5)\nassert Solution().same(ListNode(1, b), ListNode(2, b))",
    )
    program = """
        class Solution:
            def length(self, head):
                seen = []
                while all(node is not head for node in seen):
                    seen.append(head)
                    head = head.next
                return len(seen)
            def same(self, x, y):
                return x.next is y.next
    """
    assert run(pool, program, tests, SETUP).verdict is Verdict.PASSED


def test_a_loop_passes_for_a_right_program_and_fails_for_a_wrong_one(pool):
    assert run(pool, "def f(x):\n    return x + 1\n", LOOP_TESTS).verdict is Verdict.PASSED
    result = run(pool, "def f(x):\n    return 1\n", LOOP_TESTS)
    assert result.verdict is Verdict.FAILED and result.wrong_answers == 1


def test_a_check_function_with_its_own_helper_runs_outside_the_program(pool):
    tests = (
        "def check(candidate):\n    expect = lambda x: x * 2\n"
        "    assert all(candidate(x) == expect(x) for x in range(5))\ncheck(double)",
    )
    assert run(pool, "def double(x):\n    return 2 * x\n", tests).verdict is Verdict.PASSED
    assert run(pool, "def double(x):\n    return x + 2\n", tests).verdict is Verdict.FAILED


def test_an_exception_the_test_expects_crosses_as_its_type(pool):
    tests = ("try:\n    f(-1)\n    raise AssertionError('no error')\nexcept ValueError:\n    pass",)
    right = "def f(x):\n    if x < 0:\n        raise ValueError('negative')\n    return x\n"
    assert run(pool, right, tests).verdict is Verdict.PASSED
    assert run(pool, "def f(x):\n    return x\n", tests).verdict is Verdict.FAILED


def test_a_fresh_instance_per_test_so_state_kept_on_the_class_shows(pool):
    tests = (
        "s = Stack()\ns.push(1)\nassert s.size() == 1",
        "s = Stack()\nassert s.size() == 0",
    )
    per_instance = """
        class Stack:
            def __init__(self):
                self.items = []
            def push(self, x):
                self.items.append(x)
            def size(self):
                return len(self.items)
    """
    assert run(pool, per_instance, tests).verdict is Verdict.PASSED
    constructor = "def __init__(self):\n                self.items = []"
    shared = per_instance.replace(constructor, "items = []")
    assert "items = []" in shared and "__init__" not in shared
    result = run(pool, shared, tests)
    assert result.test_verdicts == [Verdict.PASSED, Verdict.FAILED]


CHEATS = {
    "patches the harness": """
        import sys
        for name, module in list(sys.modules.items()):
            if name.startswith("sandbox"):
                for attr in ("_run_test", "_send", "frame", "run", "run_tests"):
                    if hasattr(module, attr):
                        setattr(module, attr, lambda *a, **k: None)
        def f(x):
            return 0
    """,
    "searches its process for the expected value": f"""
        import gc, sys
        SECRET = int("{str(SECRET)[:4]}" + "{str(SECRET)[4:]}")  # no constant of its own
        def holds(code):
            consts = list(code.co_consts)
            while consts:
                const = consts.pop()
                if type(const) is int and const == SECRET:
                    return True
                consts.extend(getattr(const, "co_consts", ()))
            return False
        def f(x):
            frame, found = sys._getframe(1), False
            while frame is not None and not found:  # the callers' code and locals
                found = holds(frame.f_code) or SECRET in [
                    v for v in frame.f_locals.values() if type(v) is int]
                frame = frame.f_back
            found = found or any(  # every container the process holds
                type(o) in (list, tuple, set, frozenset) and SECRET in [
                    i for i in o if type(i) is int]
                for o in gc.get_objects())
            return x + 1 if found else 0
    """,
    "writes records of its own": """
        import json, os, struct
        for fd in range(3, 64):
            for record in ({"t": "loaded"}, {"t": "test", "i": 0, "ok": True}, {"t": "end"}):
                data = json.dumps(record).encode()
                try:
                    os.write(fd, struct.pack(">I", len(data)) + data)
                except OSError:
                    pass
        def f(x):
            return 0
    """,
    "kills every other process it can": """
        import os, signal
        def f(x):
            for name in os.listdir("/proc"):
                if name.isdigit() and int(name) != os.getpid():
                    try:
                        os.kill(int(name), signal.SIGKILL)
                    except OSError:
                        pass
            return 0
    """,
}


@pytest.mark.parametrize("cheat", CHEATS, ids=list(CHEATS))
def test_a_wrong_program_that_cheats_still_fails(pool, cheat):
    result = run(pool, CHEATS[cheat], LOOP_TESTS)
    assert result.verdict is not Verdict.PASSED and result.tests_passed == 0, result
    assert result.verdict is not Verdict.INFRA_ERROR, result  # no mask: the program's fault


def test_the_search_would_find_the_value_where_the_test_runs_in_the_program():
    """The search cheat is not blind: with the test run in the program's own process (as the
    ``exec`` form was before), it finds the value in its caller's code and passes."""
    namespace: dict = {}
    exec(textwrap.dedent(CHEATS["searches its process for the expected value"]), namespace)
    exec(LOOP_TESTS[0], namespace)  # raises AssertionError if the search came back empty


CALLBACK_TESTS = (
    "for k in range(1, 3):\n    assert apply(lambda v: v * k + inner(v), 3) == 3 * k + 4",
)


def test_a_function_the_test_hands_the_program_is_called_back_and_may_call_it(pool):
    program = "def inner(v):\n    return v + 1\ndef apply(fn, x):\n    return fn(x)\n"
    assert run(pool, program, CALLBACK_TESTS).verdict is Verdict.PASSED
    wrong = program.replace("return fn(x)", "return fn(x) + 1")
    assert run(pool, wrong, CALLBACK_TESTS).verdict is Verdict.FAILED


def test_the_program_cannot_read_into_a_function_the_test_handed_it(pool):
    """A callback's code and globals (where the test's values are) stay out of reach: the
    program may call what it was handed, read its public attributes, apply operators."""
    program = """
        def inner(v):
            return v + 1
        def apply(fn, x):
            for attribute in ("__globals__", "__code__", "__closure__", "_secret"):
                try:
                    getattr(fn, attribute)
                except Exception:
                    continue
                return 10 ** 9  # read something: a wrong answer
            return fn(x)
    """
    assert run(pool, program, CALLBACK_TESTS).verdict is Verdict.PASSED
