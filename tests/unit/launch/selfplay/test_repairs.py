"""Which programs are valid bugs (``launch.selfplay.repairs.BugJudge``, the rule the saboteur and
``launch.selfplay.make_repairs`` share), through the real sandbox pool, result cache on as in
training: a crash, the program's own ``assert``, a program that fails at random and the reference
itself are no bugs; an off-by-one is one."""

from __future__ import annotations

import pytest

from common.config import SandboxConfig
from common.types import ExecutionJob, Problem, Verdict
from launch.selfplay.repairs import BugJudge
from sandbox.trusted.pool import SandboxPool

REFERENCE = "def next_of(x):\n    return x + 1\n"
# 20 compare-form tests (the value is judged outside the child) and one exec-form test (the
# child runs its loop and its assert): a program failing each call at random fails the same
# tests in two runs with p ~ 2**-20.
COMPARE_TESTS = tuple(f"assert next_of({i}) == {i + 1}" for i in range(20))
EXEC_TEST = "for i in range(8):\n    assert next_of(i) - i == 1"
TESTS = (*COMPARE_TESTS, EXEC_TEST)
PROBLEM = Problem("p", "Return the next integer.", TESTS, reference_solution=REFERENCE)


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(SandboxConfig(num_workers=2)) as shared:
        yield shared


@pytest.fixture
def judge(pool):
    return BugJudge(lambda jobs, stop: pool.run(jobs, stop_at_first_failure=stop))


def _check(judge: BugJudge, program: str, problem: Problem = PROBLEM):
    return judge.check([(problem, program)])[0]


def test_an_off_by_one_is_a_valid_bug(judge):
    check = _check(judge, "def next_of(x):\n    return x + 2\n")
    assert check.status == "valid"
    assert check.result.verdict is Verdict.FAILED and check.result.wrong_answers == 21


def test_a_wrong_answer_in_some_tests_only_is_a_valid_bug(judge):
    check = _check(judge, "def next_of(x):\n    return x + 1 if x < 15 else x\n")
    assert check.status == "valid" and check.result.tests_passed == 16


def test_an_assertion_error_at_load_is_no_bug(judge):
    check = _check(judge, REFERENCE + "assert False\n")
    assert check.status == "not_a_wrong_answer"
    assert check.result.verdict is Verdict.FAILED  # the reward's verdict is unchanged


def test_an_assert_inside_the_function_is_no_bug(judge):
    # fails tests 5..19 (compare form) and the exec-form loop, always by its own assert
    check = _check(judge, "def next_of(x):\n    assert x < 5\n    return x + 1\n")
    assert check.status == "not_a_wrong_answer"
    assert check.result.verdict is Verdict.FAILED and check.result.wrong_answers == 0


def test_a_crash_in_one_test_spoils_a_wrong_answer_in_another(judge):
    program = "def next_of(x):\n    if x == 3:\n        raise ValueError\n    return x + 2\n"
    assert _check(judge, program).status == "not_a_wrong_answer"


def test_a_program_that_fails_at_random_is_no_bug(judge):
    program = "import random\n\ndef next_of(x):\n    return x + 1 + (random.random() < 0.5)\n"
    assert _check(judge, program).status == "flaky"


def test_the_unchanged_reference_is_no_bug_however_it_is_written(judge):
    program = "def next_of(x):  # the same program\n    return (x + 1)\n"
    assert _check(judge, program).status == "same_as_reference"


def test_no_bug_counts_against_a_reference_that_fails(judge):
    wrong = Problem("q", "", TESTS, reference_solution="def next_of(x):\n    return x\n")
    assert _check(judge, "def next_of(x):\n    return x + 2\n", wrong).status == "reference_fails"


def test_each_reference_runs_once(pool):
    jobs_run: list[ExecutionJob] = []

    def execute(jobs, stop):
        jobs_run.extend(jobs)
        return pool.run(jobs, stop_at_first_failure=stop)

    judge = BugJudge(execute)
    bugs = ["def next_of(x):\n    return x + 2\n", "def next_of(x):\n    return x - 1\n"]
    judge.check([(PROBLEM, bug) for bug in bugs])
    judge.check([(PROBLEM, bugs[0])])
    assert sum(job.code == REFERENCE for job in jobs_run) == 1
    assert len(jobs_run) == 1 + 2 * 2 + 2  # the reference, then every bug twice
