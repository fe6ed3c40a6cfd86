"""The public code-RL sets' own rows (APPS, TACO, CodeContests, LiveCodeBench, DeepCoder),
written here from each schema: they load through ``load_dataset`` as they are, every kind a set
holds is judged by the real sandbox (a right program passes every test, a wrong one does not),
LiveCodeBench's compressed pickles are read without running anything, and a malformed row is
one line naming its file and line."""

from __future__ import annotations

import base64
import gzip
import json
import logging
import os
import pickle
import zlib

import pytest

from common.config import SandboxConfig
from common.datasets import DatasetError, detect_format, load_dataset, parse_rows, read_rows
from common.packages import STDIO_INSTRUCTION
from common.public_sets import SOLUTION_HEADER
from common.safe_pickle import UnsafePickle, loads_compressed, restricted_loads
from common.types import Verdict
from sandbox.trusted.pool import SandboxPool

SUM = "a, b = map(int, input().split())\nprint(a + b)\n"
DIFFERENCE = "a, b = map(int, input().split())\nprint(a - b)\n"
ADD = "def add(a, b):\n    return a + b\n"
# Each test makes its own Solution(): the second call on one instance would answer -1.
MAX_SUM = """class Solution:
    def maxSum(self, nums: List[int], k: int) -> int:
        if getattr(self, "used", False):
            return -1
        self.used = True
        return sum(sorted(nums)[-k:])
"""
MIN_SUM = MAX_SUM.replace("sorted(nums)[-k:]", "sorted(nums)[:k]")
STARTER = "class Solution:\n    def maxSum(self, nums: List[int], k: int) -> int:\n        "
SUM_IO = {"inputs": ["1 2\n", ["5 7"]], "outputs": ["3\n", ["12"]]}  # lines, joined


def write(path, rows):
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt", encoding="utf-8") as out:
        out.writelines(json.dumps(row) + "\n" for row in rows)
    return path


def compressed(value: object) -> str:
    """LiveCodeBench's form of its private tests: base64 of zlib of a pickle."""
    return base64.b64encode(zlib.compress(pickle.dumps(value))).decode()


def apps_row(problem_id, io, solutions="", starter=""):
    return {
        "problem_id": problem_id,
        "question": f"Problem {problem_id}.",
        "solutions": json.dumps(solutions) if solutions else "",
        "input_output": json.dumps(io) if io is not None else "",
        "difficulty": "interview",
        "starter_code": starter,
        "url": f"https://codeforces.com/problemset/problem/{problem_id}/A",
    }


def contest_row(name, public, private=((), ()), generated=((), ()), **extra):
    return {
        "name": name,
        "description": "Print the sum of two integers.",
        "public_tests": {"input": list(public[0]), "output": list(public[1])},
        "private_tests": {"input": list(private[0]), "output": list(private[1])},
        "generated_tests": {"input": list(generated[0]), "output": list(generated[1])},
        "difficulty": 7,
        "solutions": {"language": [2, 1, 3], "solution": ["int main() {}", "print 3", SUM]},
        "time_limit": {"seconds": 2, "nanos": 500_000_000},
        "memory_limit_bytes": 256_000_000,
        "input_file": "",
        "output_file": "",
        "cf_rating": 800,
    } | extra


def lcb_row(question_id, public, private, func_name="", starter=""):
    return {
        "question_title": f"Question {question_id}",
        "question_content": "Given nums and k, return the largest sum of k elements.",
        "platform": "leetcode" if func_name else "atcoder",
        "question_id": question_id,
        "contest_id": "weekly-contest-1",
        "contest_date": "2024-01-01T00:00:00",
        "starter_code": starter,
        "difficulty": "easy",
        "public_test_cases": json.dumps(public),
        "private_test_cases": private,
        "metadata": json.dumps({"func_name": func_name} if func_name else {}),
    }


@pytest.fixture(scope="module")
def pool():
    config = SandboxConfig(num_workers=1, timeout_s=20.0, test_timeout_s=5.0, cache=False)
    with SandboxPool(config) as shared:
        yield shared


def judge(pool, cases):
    """``[(problem, program, passes)]``: each program judged on every test of its problem."""
    results = pool.run([problem.job(problem.program_prefix + code) for problem, code, _ in cases])
    for (problem, code, passes), result in zip(cases, results, strict=True):
        assert result.tests_total == problem.num_tests
        if passes:
            assert result.verdict is Verdict.PASSED, (problem.problem_id, result)
            assert result.test_verdicts == [Verdict.PASSED] * problem.num_tests
        else:
            assert result.verdict is not Verdict.PASSED, (problem.problem_id, code)


def by_id(problems):
    return {p.problem_id: p for p in problems}


# ---- APPS / TACO -----------------------------------------------------------------------------


def test_apps_rows_become_stdio_and_function_problems_and_are_judged(tmp_path, pool, caplog):
    rows = [
        apps_row(1, SUM_IO, [SUM]),
        apps_row(2, {"inputs": [[1, 2], [[1], [2]]], "outputs": [[3], [[1, 2]]], "fn_name": "add"}),
        apps_row(3, {"inputs": [[[5, 1, 4], 2]], "outputs": [9], "fn_name": "maxSum"}, [], STARTER),
        apps_row(4, None),  # APPS has rows without tests: left out, counted
    ]
    path = write(tmp_path / "apps_train.jsonl", rows)
    with caplog.at_level(logging.INFO, logger="common.datasets"):
        problems = by_id(load_dataset(path, split="all"))
    assert "skipped 1 row(s) that cannot be judged (line 4: no tests" in caplog.text
    stdio, function, solution = problems["apps/1"], problems["apps/2"], problems["apps/3"]
    assert (stdio.kind, function.kind, solution.kind) == ("stdio", "function", "class_method")
    assert [(t.input, t.answer, t.group) for t in stdio.stdio.tests] == [
        (b"1 2\n", b"3\n", "secret"),
        (b"5 7", b"12", "secret"),
    ]
    assert stdio.prompt.startswith(STDIO_INSTRUCTION.partition("\n\n")[0])
    assert stdio.reference_solution == SUM and stdio.difficulty == "interview"
    # one-element outputs hold the value (a list value is wrapped again); bare values as they are
    assert function.tests == ("assert add(1, 2) == 3", "assert add([1], [2]) == [1, 2]")
    assert solution.tests == ("assert Solution().maxSum([5, 1, 4], 2) == 9",)
    assert solution.program_prefix == SOLUTION_HEADER and STARTER.strip() in solution.prompt
    judge(
        pool,
        [
            (stdio, SUM, True),
            (stdio, DIFFERENCE, False),
            (function, ADD, True),
            (function, "def add(a, b):\n    return [a, b]\n", False),
            (solution, MAX_SUM, True),
            (solution, MIN_SUM, False),
        ],
    )


def test_taco_rows_have_their_line_as_id_and_load_gzipped(tmp_path, pool):
    taco = apps_row(0, SUM_IO) | {"tags": "['Math']", "skill_types": "[]", "source": "codeforces"}
    del taco["problem_id"]  # TACO's rows carry none
    path = write(tmp_path / "taco_test.jsonl.gz", [taco, taco | {"difficulty": "EASY"}])
    assert detect_format(taco, "x") == "taco"
    (first, second) = load_dataset(path)
    assert (first.problem_id, second.problem_id, second.difficulty) == ("taco/1", "taco/2", "EASY")
    judge(pool, [(first, SUM, True), (first, DIFFERENCE, False)])


# ---- CodeContests ----------------------------------------------------------------------------


def test_code_contests_groups_limits_and_python3_reference(tmp_path, pool, caplog):
    row = contest_row(
        "1000_A. Sum",
        public=(["1 2\n"], ["3\n"]),
        private=(["5 7\n"], ["12\n"]),
        generated=(["100 -1\n", "0 0\n"], ["99\n", "0\n"]),
    )
    rows = [
        row,
        contest_row("1001_B. File", (["1 2\n"], ["3\n"]), input_file="input.txt"),
        contest_row("1002_C. Untested", ([], [])),
    ]
    path = write(tmp_path / "code_contests_valid.jsonl", rows)
    with caplog.at_level(logging.INFO, logger="common.datasets"):
        (problem,) = load_dataset(path)
    assert "skipped 2 row(s)" in caplog.text and "'input.txt', not stdin" in caplog.text
    assert problem.problem_id == "code_contests/1000_A. Sum" and problem.difficulty == "A"
    assert [(t.name, t.group) for t in problem.stdio.tests] == [
        ("sample/1", "sample"),
        ("secret/1", "secret"),
        ("generated/1", "generated"),
        ("generated/2", "generated"),
    ]
    assert (problem.stdio.time_limit_s, problem.stdio.memory_mb) == (2.5, 245)
    assert problem.reference_solution == SUM  # language 3; 1 is Python 2
    assert "# 1000_A. Sum" in problem.prompt
    judge(pool, [(problem, SUM, True), (problem, DIFFERENCE, False)])


# ---- LiveCodeBench ---------------------------------------------------------------------------


def test_livecodebench_stdin_and_functional_rows_with_compressed_private_tests(tmp_path, pool):
    stdin = [{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}]
    hidden = [{"input": "5 7\n", "output": "12\n", "testtype": "stdin"}]
    functional = [{"input": "[1, 5, 3]\n2", "output": "8", "testtype": "functional"}]
    hidden_calls = [
        {"input": "[4, 4, 4]\n1", "output": "4", "testtype": "functional"},
        {"input": "[-1, -2]\n2", "output": "-3", "testtype": "functional"},
    ]
    rows = [
        lcb_row("abc100_a", stdin, compressed(json.dumps(hidden))),
        lcb_row("3000", functional, json.dumps(hidden_calls), "maxSum", STARTER),
    ]
    problems = by_id(load_dataset(write(tmp_path / "test6.jsonl", rows)))
    stdio, calls = problems["livecodebench/abc100_a"], problems["livecodebench/3000"]
    assert [(t.group, t.answer) for t in stdio.stdio.tests] == [
        ("sample", b"3\n"),
        ("secret", b"12\n"),
    ]
    assert "# Question abc100_a" in stdio.prompt and stdio.difficulty == "easy"
    assert calls.kind == "class_method" and calls.tests == (
        "assert Solution().maxSum([1, 5, 3], 2) == 8",
        "assert Solution().maxSum([4, 4, 4], 1) == 4",
        "assert Solution().maxSum([-1, -2], 2) == -3",
    )
    assert "`Solution().maxSum(...)`" in calls.prompt and STARTER.strip() in calls.prompt
    judge(
        pool,
        [
            (stdio, SUM, True),
            (stdio, "print(3)", False),
            (calls, MAX_SUM, True),
            (calls, MIN_SUM, False),
        ],
    )


class Shell:
    """A pickle that, loaded by ``pickle.loads``, would run a shell command."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


def test_a_malicious_pickle_is_refused_without_running(tmp_path):
    marker = tmp_path / "ran"
    evil = base64.b64encode(zlib.compress(pickle.dumps(Shell(f"touch {marker}")))).decode()
    eval_call = b"cbuiltins\neval\n(S'open(" + repr(str(marker)).encode() + b', "w")\'\ntR.'
    for number, private in enumerate((evil, base64.b64encode(zlib.compress(eval_call)).decode())):
        path = write(tmp_path / f"evil{number}.jsonl", [lcb_row("x", [], private)])
        with pytest.raises(DatasetError) as refused:
            load_dataset(path)
        message = str(refused.value)
        assert message.startswith(f"{path}:1: private_test_cases: refused global ")
        assert "\n" not in message
        assert ("system" in message) if number == 0 else ("builtins.eval" in message)
    assert not marker.exists()


def test_safe_pickle_reads_plain_values_only_and_caps_the_size():
    plain = ["text", 1, 2.5, True, None, {"key": [1, {"deep": "x"}]}]
    assert restricted_loads(pickle.dumps(plain)) == plain
    assert loads_compressed(compressed(json.dumps(plain))) == json.dumps(plain)
    for value in ((1, 2), {1, 2}, b"bytes", [frozenset()]):
        with pytest.raises(UnsafePickle, match="only plain values"):
            restricted_loads(pickle.dumps(value))
    bomb = base64.b64encode(zlib.compress(b"\0" * 100_000)).decode()
    with pytest.raises(UnsafePickle, match="inflates to more than 1000 bytes"):
        loads_compressed(bomb, limit=1000)
    for garbage, reason in (
        ("%%%", "not base64"),
        ("AAAA", "not zlib"),
        (compressed(1)[:12], "truncated"),
    ):
        with pytest.raises(UnsafePickle, match=reason):
            loads_compressed(garbage)


# ---- DeepCoder -------------------------------------------------------------------------------


def test_deepcoder_subsets_entries_and_apps_objects(tmp_path, pool):
    lcb_entries = [
        {"input": "[1, 5, 3]\n2", "output": "8", "testtype": "functional", "metadata": {}},
        {"input": "[2, 2]\n1", "output": "2", "testtype": "functional", "metadata": {}},
    ]
    rows = [  # lcbv5, primeintellect (stdin, then a call), taco, a Python literal
        {"problem": "Max sum.", "tests": json.dumps(lcb_entries), "starter_code": STARTER,
         "metadata": json.dumps({"func_name": "maxSum"})},
        {"problem": "Sum.", "tests": [{"input": "1 2\n", "output": "3\n", "type": "stdin_stdout"}],
         "solutions": [SUM]},
        {"problem": "Add.", "tests": json.dumps(
            [{"type": "function_call", "fn_name": "add", "input": [1, 2], "output": [3]}])},
        {"problem": "Add.", "tests": json.dumps(
            {"inputs": [[2, 3], [[1], [2]]], "outputs": [[5], [[1, 2]]], "fn_name": "add"})},
        {"problem": "Sum.", "tests": "[{'input': '5 7\\n', 'output': '12\\n'}]", "metadata": "{}"},
    ]  # fmt: skip
    problems = load_dataset(write(tmp_path / "deepcoder_train.jsonl", rows))
    assert [p.problem_id for p in problems] == [f"deepcoder/{n}" for n in range(1, 6)]
    assert [p.kind for p in problems] == ["class_method", "stdio", "function", "function", "stdio"]
    calls, stdio, add, apps_add, literal = problems
    assert calls.tests[0] == "assert Solution().maxSum([1, 5, 3], 2) == 8"
    assert add.tests == ("assert add(1, 2) == 3",) and apps_add.tests[1].endswith("== [1, 2]")
    assert stdio.reference_solution == SUM and literal.stdio.tests[0].answer == b"12\n"
    judge(
        pool,
        [
            (calls, MAX_SUM, True),
            (calls, MIN_SUM, False),
            (stdio, SUM, True),
            (literal, DIFFERENCE, False),
            (apps_add, ADD, True),
            (add, "def add(a, b):\n    return a * b\n", False),
        ],
    )


# ---- detection, formats, splits, errors ------------------------------------------------------


def test_each_schema_is_detected_and_an_explicit_format_is_taken(tmp_path):
    rows = {
        "apps": apps_row(1, SUM_IO),
        "code_contests": contest_row("A", (["1 2\n"], ["3\n"])),
        "livecodebench": lcb_row("a", [{"input": "1\n", "output": "1\n"}], "[]"),
        "deepcoder": {"problem": "p", "tests": [{"input": "1 2\n", "output": "3\n"}]},
    }
    for name, row in rows.items():
        assert detect_format(row, "x") == name
    path = write(tmp_path / "apps.jsonl", [rows["apps"]])
    (problem,) = parse_rows(read_rows(path), str(path), None, "taco")
    assert problem.problem_id == "taco/1"


def test_the_splits_are_the_files(tmp_path):
    path = write(tmp_path / "apps_test.jsonl", [apps_row(1, SUM_IO)])
    assert len(load_dataset(path, split="all")) == len(load_dataset(path)) == 1
    with pytest.raises(DatasetError, match=rf"^{path}: APPS's splits are its files: give split"):
        load_dataset(path, split="train")


STDIN = [{"input": "1\n", "output": "1\n", "testtype": "stdin"}]
APPS = apps_row(1, SUM_IO)
CALL = {"input": "[1\n", "output": "1", "testtype": "functional"}
MIXED = [{"input": "1", "output": "1"}, {"input": [1], "output": [1], "fn_name": "f"}]


@pytest.mark.parametrize(
    "row, message",
    [
        (APPS | {"input_output": "{not json"}, "input_output is not valid JSON"),
        ({k: v for k, v in APPS.items() if k != "question"}, "missing field(s) question"),
        (apps_row(1, {"inputs": ["1"], "outputs": []}), "has 1 inputs but 0 outputs"),
        (apps_row(1, {"inputs": [[1]], "outputs": [1], "fn_name": "a b"}), "a function name"),
        (apps_row(1, {"inputs": [1], "outputs": [1]}), "a stdin test's input and output are text"),
        (contest_row("A", (["1"], ["1", "2"])), "public_tests has 1 inputs, 2 outputs"),
        (contest_row("A", (["1"], ["1"]), time_limit=7), "time_limit must be an object"),
        (lcb_row("a", [CALL], "[]", "f"), "public_test_cases[0]: input line not JSON"),
        (lcb_row("a", STDIN, "bm90IHpsaWI="), "private_test_cases: not zlib data"),
        (lcb_row("a", STDIN, "[]") | {"metadata": "[]"}, "metadata must hold an object"),
        ({"problem": "p", "tests": [STDIN[0] | {"testtype": "x"}]}, "test type 'x' is not one"),
        ({"problem": "p", "tests": MIXED}, "mixes stdin and functional tests"),
        ({"problem": "p", "tests": "{'a': "}, "tests is neither JSON nor a Python literal"),
    ],
)
def test_a_malformed_row_is_one_line_naming_file_and_line(tmp_path, row, message):
    fine = {"problem_id": 9, "question": "q", "input_output": json.dumps(SUM_IO)}
    if "problem" in row:
        fine = {"problem": "q", "tests": STDIN}
    elif "name" in row:
        fine = contest_row("Z", (["1 2\n"], ["3\n"]))
    elif "question_content" in row:
        fine = lcb_row("z", STDIN, "[]")
    path = write(tmp_path / "rows.jsonl", [fine, row])
    with pytest.raises(DatasetError) as refused:
        load_dataset(path)
    assert str(refused.value).startswith(f"{path}:2: ") and message in str(refused.value)
    assert "\n" not in str(refused.value)
