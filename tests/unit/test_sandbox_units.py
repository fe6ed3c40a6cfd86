"""Sandbox pieces that need no worker: canonical values, test plans, reward, cache."""

from __future__ import annotations
import __future__

import struct
import types
from collections import Counter, OrderedDict, defaultdict, namedtuple

import pytest

from common.types import ExecutionJob, ExecutionResult, Verdict
from sandbox.isolated import child
from sandbox.problems import humaneval_tests
from sandbox.reward import execution_reward
from sandbox.trusted import testplan
from sandbox.trusted.result_cache import ResultCache, job_key
from sandbox.wire.canonical import Unserialisable, canonicalise, rebuild
from sandbox.wire.frames import MESSAGE_CAP, Frames, decode_message, encode


def roundtrip(value):
    return rebuild(canonicalise(value))


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        3,
        -(2**20000),
        1.5,
        float("inf"),
        "é",
        b"\x00",
        (1, [2, {3: "x"}]),
        {1, 2},
        frozenset({(1, 2)}),
        range(1, 9, 2),
        1 + 2j,
        bytearray(b"ab"),
    ],
    ids=lambda v: type(v).__name__,
)
def test_canonical_roundtrip_preserves_plain_values(value):
    rebuilt = roundtrip(value)
    assert rebuilt == value and type(rebuilt) is type(value)


def test_counter_and_defaultdict_become_plain_dicts():
    assert roundtrip(Counter("aab")) == {"a": 2, "b": 1}
    assert type(roundtrip(defaultdict(int, a=1))) is dict
    assert type(roundtrip(OrderedDict(a=1))) is dict


def test_namedtuple_becomes_tuple():
    point = namedtuple("Point", "x y")(1, 2)
    assert roundtrip(point) == (1, 2) and type(roundtrip(point)) is tuple


def test_lying_int_and_str_subclasses_are_stripped():
    class Liar(int):
        def __eq__(self, other):
            return True

    class LiarStr(str):
        def __eq__(self, other):
            return True

        def __str__(self):
            return "expected"

    assert roundtrip(Liar(5)) == 5 and roundtrip(Liar(5)) != 6
    assert roundtrip(LiarStr("real")) == "real"


def test_bool_is_not_an_int():
    assert canonicalise(True) is True and canonicalise(1) == ["int", "1"]


def test_custom_objects_cycles_and_huge_values_are_refused():
    class Anything:
        def __eq__(self, other):
            return True

    cycle: list = []
    cycle.append(cycle)
    for value in (Anything(), cycle, "x" * 2_000_000, iter([1])):
        with pytest.raises(Unserialisable):
            canonicalise(value)


def test_rebuild_rejects_malformed_data():
    for data in (["eval", "1"], ["int", 5], [1, 2, 3], "str", ["dict", [[1]]]):
        with pytest.raises((ValueError, KeyError, TypeError)):
            rebuild(data)


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


def test_humaneval_check_is_rewritten_to_top_level_asserts():
    tests = humaneval_tests(
        "def check(candidate):\n    assert candidate(1) == 2\n"
        "    x = 3\n    assert candidate(x) == 4\n",
        "inc",
    )
    assert tests[0] == "assert inc(1) == 2"
    assert testplan.plan_test(tests[0]).form == "compare"
    assert "x = 3" in tests[1] and testplan.plan_test(tests[1]).form == "exec"


def result(verdict, passed=0, total=4):
    return ExecutionResult(verdict, passed, total)


def test_reward_binary_and_partial():
    assert execution_reward(result(Verdict.PASSED, 4), "binary") == 1.0
    assert execution_reward(result(Verdict.FAILED, 3), "binary") == 0.0
    assert execution_reward(result(Verdict.FAILED, 3), "partial") == 0.75
    assert execution_reward(result(Verdict.TIMEOUT, 0), "partial") == 0.0


def test_reward_masks_infra_error():
    assert execution_reward(result(Verdict.INFRA_ERROR), "binary") is None
    assert execution_reward(result(Verdict.INFRA_ERROR), "partial") is None


def test_cache_key_depends_on_every_input_and_returns_copies():
    job = ExecutionJob("x = 1", ("assert x == 1",))
    assert job_key(job, False) != job_key(job, True)
    assert job_key(job, False) != job_key(ExecutionJob("x = 1", ("assert x == 1",), "y = 2"), False)
    cache = ResultCache(max_entries=1)
    cache.put("a", result(Verdict.PASSED))
    cache.get("a").test_verdicts.append(Verdict.FAILED)
    assert cache.get("a").test_verdicts == []
    cache.put("b", result(Verdict.PASSED))
    assert cache.get("a") is None


def test_frames_reassemble_split_reads_and_enforce_caps():
    stream = child.frame({"t": "loaded"}) + child.frame({"t": "end"})
    frames = Frames()
    assert frames.feed(stream[:3]) == []
    assert frames.feed(stream[3:]) == [{"t": "loaded"}, {"t": "end"}]
    assert Frames().feed(struct.pack(">I", 4) + b"[1]\n") == [{"t": "garbled"}]
    with pytest.raises(ValueError):
        Frames(frame_cap=10).feed(struct.pack(">I", 11))
    with pytest.raises(ValueError):
        Frames(total_cap=100).feed(b"\0" * 101)


def test_pool_worker_messages_round_trip_and_records_never_decode_as_marshal():
    message = {"op": "done", "id": 3, "recs": [{"t": "test", "values": [["int", "0x2"]]}]}
    frames = Frames(MESSAGE_CAP, None, decode_message)
    assert frames.feed(encode(message) + encode({"op": "ready"})) == [message, {"op": "ready"}]
    assert Frames().feed(encode(message)) == [{"t": "garbled"}]  # a child's pipe: JSON only


def test_server_compiles_program_setup_and_tests_as_python_would():
    parts = [{"kind": "value", "exprs": ["f(1)"]}, {"kind": "exec", "src": "assert f(2) == 3"}]
    job = child.precompiled("def f(x: int):\n    return x + 1\n", "y = 2", parts)
    assert "load_error" not in job
    codes = [job["code"], job["setup_code"], job["parts"][0]["exprs"][0], job["parts"][1]["src"]]
    assert all(isinstance(code, types.CodeType) for code in codes)
    # compiled without this harness's own `from __future__ import annotations`
    assert not job["code"].co_flags & __future__.annotations.compiler_flag
    namespace: dict = {"__builtins__": __builtins__}
    exec(job["code"], namespace)
    assert namespace["f"].__annotations__ == {"x": int}


def test_server_reports_a_program_that_does_not_compile_as_its_child_would():
    code = "def f(x) return x"
    job = child.precompiled(code, "", [])
    assert job["load_error"] == child._load(code, "", {})  # the record the child would send
    assert job["load_error"]["kind"] == "syntax"


def test_large_programs_and_tests_that_do_not_compile_travel_as_text():
    big = "#" * child.SERVER_COMPILE_MAX + "\ndef f(x) return x"
    job = child.precompiled(big, "", [{"kind": "exec", "src": "assert ("}])
    assert job["code"] == big and "load_error" not in job  # the child compiles and reports
    assert job["parts"][0]["src"] == "assert ("


def test_a_split_job_asks_the_program_only_for_the_names_nothing_else_binds():
    header = "from typing import *\nfrom math import *\nclass ListNode:\n    pass\n"
    header += "def list_node(values):\n    return ListNode()\n"
    tests = ("assert is_same(Solution().f(list_node([1]), k=inf), [x for x in range(3)])",)
    assert testplan.program_names(header, tests) == ["Solution", "is_same"]
    module = "import unittest\nfrom os import path as p\nclass T(unittest.TestCase):\n"
    module += "    def test_a(self):\n        self.assertEqual(abbreviate(p.sep), 'X')\n"
    assert testplan.program_names(module, ()) == ["abbreviate"]
