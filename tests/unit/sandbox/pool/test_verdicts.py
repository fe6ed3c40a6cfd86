"""Honest and cheating programs through the shared pool: each gets the verdict its tests earn,
whatever the program prints, patches or returns, and the results keep their input order."""

from __future__ import annotations

import pytest

from common.types import ExecutionJob, Verdict
from sandbox.isolated.child import SERVER_COMPILE_MAX
from tests.unit.sandbox.helpers import F_TESTS, GOOD_F, run


def test_honest_solution_passes(pool):
    assert run(pool, GOOD_F).verdict is Verdict.PASSED


def test_honest_prints_imports_and_scratch_files_pass(pool):
    code = """
        import collections, heapq, itertools, tempfile
        print("debug output")
        with open("notes.txt", "w") as fh:
            fh.write("ok")
        with tempfile.TemporaryFile() as tmp:
            tmp.write(b"x")
        def f(x):
            return open("notes.txt").read() and x + 1
    """
    assert run(pool, code).verdict is Verdict.PASSED


def test_modules_left_out_of_the_preloads_import_in_the_child(pool):
    """The zygote preloads only what programs commonly import; the rest loads in the child,
    C extensions included, from the read-only view of the interpreter's files."""
    code = """
        import datetime, decimal, fractions, random, statistics, unicodedata
        def f(x):
            assert datetime.date(2024, 1, 1).isoweekday() == 1
            assert decimal.Decimal("0.1") * 3 == decimal.Decimal("0.3")
            assert statistics.mean([fractions.Fraction(1, 2), 1]) == fractions.Fraction(3, 4)
            assert unicodedata.name("a") == "LATIN SMALL LETTER A"
            return x + 1 + int(random.random())
    """
    assert run(pool, code).verdict is Verdict.PASSED


def test_slow_but_within_limit_passes(pool):
    assert run(pool, "import time\ndef f(x):\n    time.sleep(0.3)\n    return x + 1\n").passed


def test_wrong_answer_fails_with_partial_credit(pool):
    result = run(pool, "def f(x):\n    return 2 if x == 1 else 0\n")
    assert result.verdict is Verdict.FAILED and result.tests_passed == 1 and result.tests_total == 2


def test_stop_at_first_failure_stops(pool):
    result = run(pool, "def f(x):\n    return 0\n", stop=True)
    assert result.verdict is Verdict.FAILED and result.test_verdicts == [Verdict.FAILED]


@pytest.mark.parametrize("exit_call", ["sys.exit(0)", "os._exit(0)", "raise SystemExit(0)"])
def test_exit_before_tests_is_runtime_error(pool, exit_call):
    code = f"import os, sys\n{GOOD_F}{exit_call}\n"
    assert run(pool, code).verdict is Verdict.RUNTIME_ERROR


@pytest.mark.parametrize("exit_call", ["sys.exit(0)", "os._exit(0)"])
def test_exit_during_tests_is_runtime_error(pool, exit_call):
    code = f"import os, sys\ndef f(x):\n    {exit_call}\n"
    result = run(pool, code)
    assert result.verdict is Verdict.RUNTIME_ERROR and result.tests_passed == 0


def test_atexit_and_printed_markers_do_not_pass(pool):
    code = """
        import atexit, os
        atexit.register(lambda: print("ALL TESTS PASSED"))
        print('{"t": "end"}', "PASSED", flush=True)
        def f(x):
            print("assert passed")
            return 0
        os.write(1, b"ok\\n")
    """
    assert run(pool, code).verdict is Verdict.FAILED


def test_lying_eq_objects_fail(pool):
    code = """
        class Anything:
            def __eq__(self, other):
                return True
            __hash__ = object.__hash__
        class LiarInt(int):
            def __eq__(self, other):
                return True
        def f(x):
            return Anything() if x == 1 else LiarInt(0)
    """
    result = run(pool, code)
    assert result.verdict is Verdict.FAILED and result.tests_passed == 0


def test_lying_str_subclass_fails(pool):
    code = "class S(str):\n    def __eq__(self, o):\n        return True\n"
    code += "def f(x):\n    return S('no')\n"
    assert run(pool, code, ("assert f(1) == 'yes'",)).verdict is Verdict.FAILED


def test_counter_equals_dict_literal(pool):
    code = "from collections import Counter\ndef f(s):\n    return Counter(s)\n"
    assert run(pool, code, ("assert f('aab') == {'a': 2, 'b': 1}",)).passed


def test_frame_walking_and_gc_find_no_expected_value(pool):
    code = """
        import gc, sys
        def f(x):
            prefix = "s3cr3t" + "-"
            seen = []
            frame = sys._getframe()
            while frame is not None:
                seen += list(frame.f_locals.values()) + list(frame.f_globals.values())
                frame = frame.f_back
            for obj in gc.get_objects() + seen:
                items = list(obj.values()) if isinstance(obj, dict) else [obj]
                for item in obj if isinstance(obj, (list, tuple)) else items:
                    if isinstance(item, str) and item.startswith(prefix) and item != prefix:
                        return item
            return None
    """
    assert run(pool, code, ("assert f(1) == 's3cr3t-42'",)).verdict is Verdict.FAILED


def test_patched_builtins_and_json_gain_nothing(pool):
    code = """
        import builtins, json
        json.dumps = lambda *a, **k: '{"t": "test", "i": 0, "ok": true}'
        builtins.len = lambda x: 3
        builtins.isinstance = lambda *a: True
        def f(x):
            return [0]
    """
    result = run(pool, code, ("assert len(f(1)) == 3",))
    assert result.verdict is not Verdict.PASSED


# The server compiles programs up to child.SERVER_COMPILE_MAX; a larger one is compiled in the
# child. Either way a program must behave as under ``python FILE``.
PADDING = {"compiled_by_server": "", "compiled_in_child": "#" * (SERVER_COMPILE_MAX + 1) + "\n"}


@pytest.mark.parametrize("where", PADDING)
def test_syntax_error(pool, where):
    result = run(pool, PADDING[where] + "def f(x) return x")
    assert result.verdict is Verdict.SYNTAX_ERROR
    assert result.detail.startswith("SyntaxError: ")


@pytest.mark.parametrize("where", PADDING)
def test_nul_bytes_are_syntax_error(pool, where):
    code = PADDING[where] + "def f(x):\n    return x + 1\x00\n"
    assert run(pool, code).verdict is Verdict.SYNTAX_ERROR


@pytest.mark.parametrize("where", PADDING)
def test_annotations_are_evaluated_as_python_does(pool, where):
    """No ``from __future__ import annotations`` leaks from the harness into the program."""
    code = PADDING[where] + "def f(x: int) -> int:\n    return x + 1\n"
    assert run(pool, code, ("assert f.__annotations__['x'] is int", *F_TESTS)).passed
    undefined = run(pool, PADDING[where] + "def f(x: Undefined):\n    return x + 1\n")
    assert undefined.verdict is Verdict.RUNTIME_ERROR
    assert "NameError" in undefined.detail


def test_huge_source_is_rejected(pool):
    assert run(pool, "x = 1\n" * 300_000 + GOOD_F).verdict is Verdict.SYNTAX_ERROR


def test_job_larger_than_a_pipe_buffer_reaches_the_child(pool):
    padding = "# " + "x" * 200 + "\n"
    code = padding * 2000 + GOOD_F  # ~400 KB, several pipe buffers
    assert run(pool, code).verdict is Verdict.PASSED


def test_results_keep_input_order_in_parallel(pool):
    jobs = [ExecutionJob(f"def f(x):\n    return {i}\n", ("assert f(0) == 3",)) for i in range(10)]
    results = pool.run(jobs)
    assert [r.passed for r in results] == [i == 3 for i in range(10)]
