"""Whole programs on stdin/stdout through the shared pool: each test one execution, the output
compared on the trusted side as the Kattis default validator compares it, the verdicts a
contest judge gives, and the answer out of every program's reach."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from common.types import ExecutionJob, StdioSpec, StdioTest, Validator, Verdict

SUM_TESTS = (
    StdioTest("sample/1", b"1 2\n", b"3\n", "sample"),
    StdioTest("secret/1", b"5 7\n", b"12\n"),
    StdioTest("secret/2", b"100 -1\n", b"99"),  # no final newline: not compared
)
SUM = "a, b = map(int, input().split())\nprint(a + b)\n"


def judge(pool, code: str, tests=SUM_TESTS, stop: bool = False, **limits):
    job = ExecutionJob(textwrap.dedent(code), (), stdio=StdioSpec(tuple(tests), **limits))
    return pool.run([job], stop_at_first_failure=stop)[0]


@pytest.mark.parametrize(
    "code",
    [
        SUM,
        "import sys\nprint(sum(map(int, sys.stdin.read().split())))\nsys.exit(0)",
        "import sys\nn = sum(map(int, sys.stdin.buffer.read().split()))\n"
        "sys.stdout.buffer.write(b'%d\\n' % n)",
        "import os\nos.write(1, str(sum(map(int, os.read(0, 100).split()))).encode())",
        "print(sum(map(int, open(0).read().split())), end='')\nexit()",
        # whitespace is not compared by default: leading, trailing, runs, tabs, CR
        "a, b = map(int, input().split())\nprint('\\n\\t ', a + b, ' \\r\\n\\n')",
    ],
    ids=["input", "sys_exit_0", "buffer", "os_fds", "open_0_exit", "whitespace"],
)
def test_right_programs_pass_every_test(pool, code):
    result = judge(pool, code)
    assert (result.verdict, result.tests_passed, result.tests_total) == (Verdict.PASSED, 3, 3)
    assert result.test_verdicts == [Verdict.PASSED] * 3


@pytest.mark.parametrize(
    ("code", "passed"),
    [
        ("a, b = map(int, input().split())\nprint(a + b, 0)", 0),  # an extra token
        ("a, b = map(int, input().split())\nprint(b, a + b)", 0),  # the answer after junk
        ("print()", 0),  # a prefix of the answer: nothing
        ("a, b = map(int, input().split())\nprint(a - b)", 0),
        ("print(3)", 1),  # right on the first test file only
    ],
    ids=["extra_token", "junk_first", "empty", "wrong_value", "first_test_only"],
)
def test_wrong_output_fails(pool, code, passed):
    result = judge(pool, code)
    assert result.verdict is Verdict.FAILED
    assert result.tests_passed == passed
    assert result.wrong_answers == 3 - passed


@pytest.mark.parametrize(
    ("code", "verdict", "detail"),
    [
        ("raise ValueError('x')", Verdict.RUNTIME_ERROR, "exit status 1"),
        ("print(3)\nimport sys\nsys.exit(3)", Verdict.RUNTIME_ERROR, "exit status 3"),
        (
            "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)",
            Verdict.RUNTIME_ERROR,
            "signal 11",
        ),
        ("while True:\n    pass", Verdict.TIMEOUT, "time limit"),
        ("print('x' * (3 << 20))", Verdict.OUTPUT_LIMIT, "output limit"),
        ("import sys\nsys.stderr.write('x' * (3 << 20))", Verdict.OUTPUT_LIMIT, "output limit"),
        ("def (", Verdict.SYNTAX_ERROR, "SyntaxError"),
    ],
    ids=["exception", "exit_3", "segfault", "loop", "stdout_flood", "stderr_flood", "syntax"],
)
def test_how_a_program_ends_decides_before_its_output(pool, code, verdict, detail):
    result = judge(pool, code, stop=True, time_limit_s=0.5, output_mb=2)
    assert result.verdict is verdict
    assert result.test_verdicts == [verdict]  # stopped at the first test (a sample)
    assert detail in result.detail


def test_the_standard_streams_are_what_python3_gives_a_program_on_pipes(pool):
    """UTF-8 both ways, bytes as they are through ``.buffer``, not seekable (a stream made
    before the fork must not remember the worker's /dev/null), no newline translation."""
    code = """
        import sys
        raw = sys.stdin.buffer.readline()
        print(sys.stdin.seekable(), sys.stdout.seekable(), sys.stdin.encoding, sys.stdout.encoding)
        print(raw == b"\\xff\\n", sys.stdin.readline() == "é\\r\\n")
    """
    given = b"\xff\n" + "é\r\n".encode()
    tests = (StdioTest("secret/1", given, b"False False utf-8 utf-8\nTrue True\n"),)
    result = judge(pool, code, tests)
    assert result.verdict is Verdict.PASSED, result.detail


def test_right_output_then_a_crash_is_a_runtime_error(pool):
    """A contest judge reads the exit status: the answer printed before dying does not pass."""
    result = judge(pool, SUM + "raise SystemExit('bye')")
    assert result.verdict is Verdict.RUNTIME_ERROR
    assert result.tests_passed == 0


def test_a_program_that_closes_its_output_and_lingers_fails(pool):
    code = SUM + "import os, time\nos.close(1)\ntime.sleep(30)"
    result = judge(pool, code, stop=True, time_limit_s=10.0)  # killed 100 ms after its stdout
    assert result.verdict is Verdict.RUNTIME_ERROR
    assert "closed its output and went on running" in result.detail


def test_memory_limit_of_the_problem(pool):
    """The problem's own limit, under the sandbox's: 64 MiB where the pool allows 256."""
    code = "x = bytearray(150 << 20)\nprint(len(x))"
    tests = (StdioTest("secret/1", b"", b"157286400"),)
    assert judge(pool, code, tests).verdict is Verdict.PASSED
    result = judge(pool, code, tests, memory_mb=64)
    assert result.verdict in (Verdict.RUNTIME_ERROR, Verdict.MEMORY_LIMIT)


def test_samples_run_first_and_binary_stops_at_the_first_failure(pool):
    tests = (SUM_TESTS[1], SUM_TESTS[2], SUM_TESTS[0])  # the sample last in the spec
    result = judge(pool, "print(3)", tests, stop=True)
    assert result.test_verdicts == [Verdict.PASSED, Verdict.FAILED]  # sample, then secret/1
    assert "secret/1" in result.detail
    assert judge(pool, "print(3)", tests).test_verdicts == [
        Verdict.PASSED,
        Verdict.FAILED,
        Verdict.FAILED,
    ]


def test_a_hidden_tests_answer_is_not_in_the_detail(pool):
    """The detail feeds a repair episode's next turn: a sample's difference is shown (its answer
    is in the statement), a hidden test's is not."""
    hidden = StdioTest("secret/9", b"1\n", b"secret-token-8c1f\n")
    result = judge(pool, "print('nope')", (hidden,))
    assert result.verdict is Verdict.FAILED
    assert "secret-token" not in result.detail
    sample = StdioTest("sample/1", b"1\n", b"shown-token\n", "sample")
    assert "shown-token" in judge(pool, "print('nope')", (sample,)).detail


def test_stdin_larger_than_a_pipe_streams_in_and_output_streams_out(pool):
    """2 MiB in and out: the input is written as the program reads it, the output sent to the
    front in pieces (a pipe holds 64 KiB)."""
    numbers = b" ".join(b"%d" % i for i in range(300_000))
    code = "import sys\ndata = sys.stdin.buffer.read()\nsys.stdout.buffer.write(data[::-1])"
    tests = (StdioTest("secret/big", numbers, numbers[::-1]),)
    result = judge(pool, code, tests, time_limit_s=10.0)
    assert result.verdict is Verdict.PASSED


@pytest.mark.parametrize("as_file", [False, True], ids=["inline", "file"])
def test_the_answer_is_nowhere_in_the_programs_view(pool, tmp_path, as_file):
    """A program that searches every file it can read, every process's command line and
    environment and its open descriptors for the answer, and prints it if found, fails. The
    same search finds an answer put in its input, and the program told the answer passes: the
    search works, and finding it would be rewarded."""
    token = "answer-9f2c41d87be0"
    answer: bytes | Path = f"{token}\n".encode()
    if as_file:
        answer = tmp_path / "1.ans"
        answer.write_bytes(f"{token}\n".encode())
    search = (Path(__file__).parent / "answer_search.py").read_text()
    hidden = (StdioTest("secret/1", b"what is the answer?\n", answer),)
    result = judge(pool, search, hidden, time_limit_s=30.0)
    assert result.verdict is Verdict.FAILED, result.detail
    given = (StdioTest("secret/1", f"it is {token}\n".encode(), answer),)
    assert judge(pool, search, given, time_limit_s=30.0).verdict is Verdict.PASSED
    told = search.replace("TOLD = None", f"TOLD = {token!r}")
    assert judge(pool, told, hidden, time_limit_s=30.0).verdict is Verdict.PASSED


NEAR_PY = """
import sys
from margin import MARGIN
want = int(open(sys.argv[2]).read())
assert sys.argv[3] == "feedback/" and sys.argv[4:] == ["--strict"], sys.argv
try:
    got = int(sys.stdin.read())
except ValueError:
    sys.exit(43)
sys.exit(42 if abs(got - want) <= MARGIN else 43)
"""


@pytest.mark.parametrize(("offset", "passed"), [(1, True), (2, False)])
def test_a_python_output_validator_gets_its_arguments_and_files(pool, offset, passed):
    files = (("near.py", NEAR_PY.encode()), ("margin.py", b"MARGIN = 1\n"))
    validator = Validator("python", files, "near.py", "--strict")
    spec = StdioSpec(SUM_TESTS, validator=validator)
    code = f"a, b = map(int, input().split())\nprint(a + b + {offset})"
    result = pool.run([ExecutionJob(code, (), stdio=spec)])[0]
    assert result.passed is passed, result.detail
    assert result.verdict is (Verdict.PASSED if passed else Verdict.FAILED)


@pytest.mark.parametrize(
    "code",
    [
        # the contest idiom: main in a thread with a larger stack; the interpreter waits for it
        "import threading\nthreading.stack_size(1 << 26)\n"
        "threading.Thread(target=lambda: print(sum(map(int, input().split())))).start()",
        "import atexit\na, b = map(int, input().split())\natexit.register(print, a + b)",
        "import sys\nprint(sum(map(int, input().split())))\nsys.stdout.close()",
    ],
    ids=["thread", "atexit", "stdout_closed"],
)
def test_what_python3_does_at_exit_is_done(pool, code):
    result = judge(pool, code)
    assert result.verdict is Verdict.PASSED, result.detail


def test_a_runtime_errors_detail_ends_with_the_programs_traceback(pool):
    result = judge(pool, "def f():\n    raise KeyError('missing')\nf()", stop=True)
    assert result.verdict is Verdict.RUNTIME_ERROR
    assert result.detail.endswith("KeyError: 'missing'"), result.detail
    assert "sandbox" not in result.detail  # the harness's own frames are not shown
