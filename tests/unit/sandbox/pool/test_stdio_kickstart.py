"""Kick Start packages' real answers (../shared/data/codejam), judged through the pool: programs
that print an answer file changed in one way each, the ways other judges get wrong.

Each program holds a table from its input's digest to what it prints, so one program covers
every test file of a problem. The answers stay files (``StdioTest.answer`` a path), read by
the front in chunks, and the flags are the packages' own (``float_tolerance 1e-6`` in both).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from common.types import ExecutionJob, StdioSpec, StdioTest, Verdict
from tests.conftest import REPO_ROOT

KICKSTART = REPO_ROOT.parent / "shared" / "data" / "codejam" / "kickstart"
MOIST = KICKSTART / "2013" / "practice_round" / "moist"  # integers: "Case #1: 7"
YEETZHEE = KICKSTART / "2020" / "round_f" / "yeetzhee"  # reals: "Case #1: 4.7"
FLAGS = "float_tolerance 1e-6"
NUMBER = re.compile(rb"(?<=: )-?[0-9]+(?:\.[0-9]+)?")


def package_tests(package: Path) -> tuple[StdioTest, ...]:
    """The package's tests, samples first, each answer a file."""
    inputs = sorted((package / "data").rglob("*.in"), key=lambda p: "sample" not in p.parts)
    return tuple(
        StdioTest(
            str(path.relative_to(package / "data").with_suffix("")),
            path.read_bytes(),
            path.with_suffix(".ans"),
            path.parent.relative_to(package / "data").as_posix(),
            FLAGS,
        )
        for path in inputs
    )


def table_program(outputs: dict[bytes, bytes]) -> str:
    """A program printing ``outputs[its input]`` (by digest), and the first entry's output for
    an input it does not know."""
    table = {hashlib.sha256(key).hexdigest(): value for key, value in outputs.items()}
    return (
        "import hashlib, sys\n"
        f"TABLE = {table!r}\n"
        "data = sys.stdin.buffer.read()\n"
        f"out = TABLE.get(hashlib.sha256(data).hexdigest(), {next(iter(table.values()))!r})\n"
        "sys.stdout.buffer.write(out)\n"
    )


def judge(pool, package: Path, change: Callable[[bytes], bytes], only_first: bool = False):
    tests = package_tests(package)
    chosen = tests[:1] if only_first else tests
    outputs = {test.input: change(test.answer.read_bytes()) for test in chosen}
    job = ExecutionJob(table_program(outputs), (), stdio=StdioSpec(tests))
    return pool.run([job])[0]


def swap_first_values(answer: bytes) -> bytes:
    """The first two different case values exchanged: every token right, two in wrong places."""
    found = list(NUMBER.finditer(answer))
    first = found[0]
    second = next(m for m in found if m.group() != first.group())
    return b"".join(
        [
            answer[: first.start()],
            second.group(),
            answer[first.end() : second.start()],
            first.group(),
            answer[second.end() :],
        ]
    )


def scale_reals(factor: float) -> Callable[[bytes], bytes]:
    def change(answer: bytes) -> bytes:
        return NUMBER.sub(lambda m: repr(float(m.group()) * factor).encode(), answer)

    return change


def respace(answer: bytes) -> bytes:
    return b"\r\n\t " + answer.replace(b" ", b" \t  ").replace(b"\n", b"\r\n\n") + b"   \n\n"


PASSING = {
    "exact": lambda answer: answer,
    "whitespace_only": respace,
    "reals_within_1e-7": scale_reals(1 + 1e-7),
}
FAILING = {
    "two_values_swapped": swap_first_values,
    "last_line_missing": lambda answer: answer.rstrip(b"\n").rpartition(b"\n")[0],
    "extra_token": lambda answer: answer + b"\n0\n",  # yeetzhee's sample ends "9.0", no newline
}


@pytest.mark.parametrize("change", PASSING, ids=list(PASSING))
@pytest.mark.parametrize("package", [MOIST, YEETZHEE], ids=["moist", "yeetzhee"])
def test_the_answer_and_its_allowed_variants_pass(pool, package, change):
    result = judge(pool, package, PASSING[change])
    assert result.verdict is Verdict.PASSED, result.detail
    assert result.tests_passed == result.tests_total == len(package_tests(package))


@pytest.mark.parametrize("change", FAILING, ids=list(FAILING))
@pytest.mark.parametrize("package", [MOIST, YEETZHEE], ids=["moist", "yeetzhee"])
def test_answers_changed_fail_every_test(pool, package, change):
    result = judge(pool, package, FAILING[change])
    assert result.verdict is Verdict.FAILED, result.detail
    assert result.tests_passed == 0
    assert result.wrong_answers == result.tests_total


def test_letter_case_is_not_compared_by_default(pool):
    """The default validator's rule (``case_sensitive`` is a flag), which lowercasing judges
    share only by accident."""
    lowered = judge(pool, MOIST, lambda answer: answer.replace(b"Case", b"case"))
    assert lowered.verdict is Verdict.PASSED


def test_reals_outside_the_tolerance_fail(pool):
    result = judge(pool, YEETZHEE, scale_reals(1 + 1e-4))
    assert result.verdict is Verdict.FAILED
    assert result.tests_passed == 0


@pytest.mark.parametrize("package", [MOIST, YEETZHEE], ids=["moist", "yeetzhee"])
def test_a_program_right_on_the_first_test_file_only_fails(pool, package):
    """Scoring the first tests only (or one of them) would pass it."""
    result = judge(pool, package, lambda answer: answer, only_first=True)
    assert result.verdict is Verdict.FAILED
    assert result.tests_passed == 1 < result.tests_total
