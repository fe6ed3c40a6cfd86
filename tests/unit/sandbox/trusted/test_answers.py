"""sandbox/trusted/answers.py: what the Kattis default output validator compares, and its flags.

The expected behaviour follows problemtools' ``default_validator.cc`` and its tests
(``tests/default_validator_tests/``, Kattis/problemtools 8f733ef); the streaming
half (chunkings, the validator's loop as a reference, memory, Kick Start answers) is
test_answers_streaming.py.
"""

from __future__ import annotations

import re

import pytest

from sandbox.trusted.answers import (
    AnswerComparison,
    AnswerFlags,
    parse_number,
)
from tests.unit.sandbox.trusted.answer_helpers import CASE, DEFAULT, SPACE, TOL, check

# -- what is compared -----------------------------------------------------------------------


def test_identical_output_is_accepted():
    result = check(b"Case #1: 3\nCase #2: 5\n", b"Case #1: 3\nCase #2: 5\n")
    assert result == AnswerComparison(True, "Accepted (6 tokens)")


def test_right_tokens_in_the_wrong_order_fail():
    result = check(b"Case #1: 5\nCase #2: 3\n", b"Case #1: 3\nCase #2: 5\n")
    assert not result.accepted
    assert (result.token, result.output_line, result.answer_line) == (3, 1, 1)
    assert 'expected "3", got "5"' in result.message


def test_a_prefix_of_the_answer_fails():
    result = check(b"Hello \n", b"Hello World!\n")
    assert (result.accepted, result.token, result.output_line, result.answer_line) == (
        False,
        2,
        2,
        1,
    )
    assert 'the output ended; expected "World!"' in result.message
    assert "output is empty" in check(b"", b"Hello").message
    only_space = check(b" \n\n  \n", b"Hello World!\n")
    assert "only whitespace" in only_space.message
    assert (only_space.token, only_space.output_line) == (1, 4)


def test_extra_tokens_fail_as_trailing_output():
    result = check(b"Hello World! again", b"Hello World!\n")
    assert (result.accepted, result.token, result.output_line, result.answer_line) == (
        False,
        3,
        1,
        2,
    )
    assert 'trailing output "again"' in result.message
    assert not check(b"1 2", b"").accepted
    assert check(b" \n\t", b"").accepted


@pytest.mark.parametrize(
    "output",
    [b"1 2\n3\n", b"1  2\n3", b"  1\t2\r\n3\n\n\n", b"1\n2 3 ", b"1\x0b2\x0c3"],
)
def test_whitespace_differences_pass_by_default_and_fail_when_space_change_sensitive(output):
    answer = b"1 2\n3\n"
    assert check(output, answer).accepted
    assert check(output, answer, SPACE).accepted is (output == answer)


def test_space_change_sensitive_compares_every_whitespace_byte():
    missing = check(b"hello\nworld", b"hello\n world", SPACE)
    assert (missing.token, missing.output_line, missing.answer_line) == (2, 2, 2)
    assert "expected ' ', got 'w'" in missing.message
    extra = check(b"hello\n world", b"hello\nworld", SPACE)
    assert (extra.token, extra.output_line, extra.answer_line) == (2, 2, 2)
    assert "extra whitespace ' '" in extra.message
    assert "got the end" in check(b"1", b"1\n", SPACE).message
    assert "after the answer's last token" in check(b"1\n\n", b"1\n", SPACE).message
    assert not check(b"1\r\n", b"1\n", SPACE).accepted
    assert not check(b" 1\n", b"1\n", SPACE).accepted
    crlf = check(b"a\nb\r\nc", b"a\nb\nc", SPACE)
    assert (crlf.output_line, crlf.answer_line) == (2, 2)
    every = AnswerFlags.parse("case_sensitive space_change_sensitive float_tolerance 0.5")
    assert check(b"PI is 3.14", b"PI is 3.14", every).accepted
    assert not check(b"PI is 2.0", b"PI is 1.0", every).accepted


def test_case_is_ignored_unless_case_sensitive():
    assert check(b"YES no", b"yes NO").accepted
    result = check(b"hello", b"Hello", CASE)
    assert not result.accepted
    assert 'expected "Hello", got "hello"' in result.message
    assert check(b"Hello", b"Hello", CASE).accepted
    # strcasecmp folds ASCII letters only
    assert not check("É".encode(), "é".encode()).accepted


@pytest.mark.parametrize(
    ("flags", "output", "answer", "accepted"),
    [
        ("float_absolute_tolerance 0.5", b"1.4", b"1", True),
        ("float_absolute_tolerance 0.1", b"1.4", b"1", False),
        ("float_absolute_tolerance 0.5", b"1.5", b"1", True),
        ("float_absolute_tolerance 0.5", b"1.5000001", b"1", False),
        ("float_relative_tolerance 0.1", b"105", b"100", True),
        ("float_relative_tolerance 0.01", b"105", b"100", False),
        ("float_relative_tolerance 0.01", b"101", b"100", True),
        ("float_relative_tolerance 0.01", b"101.0001", b"100", False),
        ("float_relative_tolerance 0.01", b"0.001", b"0", False),  # no relative slack at 0
        ("float_tolerance 0.5", b"1.1", b"1", True),
        ("float_tolerance 0.5", b"1.50001", b"1", False),
        ("float_tolerance 1e-6", b"1000000.9", b"1000000", True),  # relative
        ("float_tolerance 1e-6", b"1000001.1", b"1000000", False),
        ("float_tolerance 1e-6", b"0.0000009", b"0", True),  # absolute
        ("float_tolerance 1e-6", b"0.0000011", b"0", False),
        # any formatting of a number: integers and hexadecimal included
        ("float_tolerance 1e-9", b"3.14000000e-2", b"0.0314", True),
        ("float_tolerance 1e-9", b"2.0e2", b"200", True),
        ("float_tolerance 1e-9", b"0x1.8p1", b"3", True),
        ("float_tolerance 1e-9", b"-0", b"0", True),
        ("float_tolerance 1e-9", b"+.5", b"0.5", True),
        # without a tolerance, numbers are strings
        ("", b"1.00", b"1.0", False),
        ("", b"2.0e2", b"200", False),
        # inf and nan in the answer are strings (case-insensitive), never numbers
        ("float_tolerance 0.5", b"0", b"inf", False),
        ("float_tolerance 0.5", b"INF", b"inf", True),
        ("float_tolerance 0.5", b"NaN", b"nan", True),
        # a number in the answer needs a number in the output
        ("float_tolerance 0.5", b"nan", b"1", False),
        ("float_tolerance 0.5", b"inf", b"1e308", False),
        ("float_tolerance 0.5", b"1e999", b"1e308", False),
        ("float_tolerance 0.5", b"one", b"1", False),
        ("float_tolerance 0.5", b"1e", b"1", False),  # a dangling exponent is not a number
        ("float_tolerance 0.5", b"1,0", b"1", False),
        # a non-number in the answer compares as a string even with a tolerance
        ("float_tolerance 0.5", b"#2:", b"#1:", False),
        ("float_tolerance 0.5", b"case", b"Case", True),
    ],
)
def test_float_tolerances(flags, output, answer, accepted):
    assert check(output, answer, AnswerFlags.parse(flags)).accepted is accepted


def test_a_number_in_the_answer_against_a_non_number_output():
    result = check(b"Case #1: impossible", b"Case #1: 0.5", TOL)
    assert (result.accepted, result.token) == (False, 3)
    assert 'expected a number near "0.5", got "impossible"' in result.message
    too_far = check(b"1.4", b"1", AnswerFlags.parse("float_absolute_tolerance 0.1"))
    assert "absolute error 0.4" in too_far.message
    assert "tolerance: absolute 0.1, relative none" in too_far.message
    assert "undefined" in check(b"1", b"0", AnswerFlags.parse("float_tolerance 0.1")).message


@pytest.mark.parametrize(
    ("token", "value"),
    [
        # what glibc 2.36's sscanf("%lf%10s") returned exactly one field for, finite
        (b"1", 1.0),
        (b"1e5", 1e5),
        (b"1.e5", 1e5),
        (b".5", 0.5),
        (b"0x1", 1.0),
        (b"0x1p3", 8.0),
        (b"0x1.8", 1.5),
        (b"0X1P-2", 0.25),
        (b"0x.8", 0.5),
        (b"-0", -0.0),
        (b"+.5e-3", 0.0005),
        (b"1e-999", 0.0),
        (b"00012", 12.0),
        # ... and what it did not
        (b".", None),
        (b"+", None),
        (b"0x", None),
        (b"1x", None),
        (b"inf", None),
        (b"INF", None),
        (b"infinity", None),
        (b"nan", None),
        (b"nan(12)", None),
        (b"1e999", None),
        (b"1,5", None),
        (b"1_0", None),
        (b"0b1", None),
        (b"1f", None),
        (b"--1", None),
        (b"1ee5", None),
        (b"0x1g", None),
        (b"1.5\x00", None),
        # glibc before BZ #12701's fix read these as the number before the dangling part
        (b"1e", None),
        (b"1e+", None),
        (b"0e", None),
        (b"0x1p", None),
    ],
)
def test_what_counts_as_a_number(token, value):
    assert parse_number(token) == value


def test_control_bytes_and_invalid_utf8_are_token_bytes():
    assert not check(b"a\x00b", b"a b").accepted  # NUL is not whitespace
    assert not check(b"a\x1cb", b"a b").accepted  # nor the separators str.split() knows
    assert not check(b"a\x85b", b"a b").accepted  # nor NEL
    nul = check(b"42\x00junk", b"42")  # compared whole (strcmp would stop at the NUL)
    assert not nul.accepted
    assert "\\x00" in nul.message
    bad = check(b"caf\xe9 \xff", b"caf\xc3\xa9 \xff")
    assert not bad.accepted
    assert "caf\\xe9" in bad.message
    assert check(b"\xff\xfe", b"\xff\xfe").accepted


def test_messages_cut_enormous_tokens():
    huge = b"a" * 1_000_000
    cases = [
        (huge + b"b", huge + b"c", DEFAULT),
        (b"x" + huge, b"y" + huge, DEFAULT),
        (huge, b"1", TOL),
        (b"1 " + huge, b"1", DEFAULT),
        (b"", huge, DEFAULT),
        (huge, b"1", DEFAULT),
    ]
    for output, answer, flags in cases:
        result = check(output, answer, flags)
        assert not result.accepted
        assert len(result.message) < 200, result.message
    pair = check(b"aaaaA" + b"a" * 300, b"aaaaaA" + b"a" * 300, CASE)
    assert 'expected "aaaaaAaaaaaaaaaaaaa...", got "aaaaAaaaaaaaaaaaaaa..."' in pair.message
    rocket = check(b"1.4" + "🚀".encode() * 100, b"1", TOL)
    assert "🚀..." in rocket.message  # cut between characters, not inside one


# -- flags ------------------------------------------------------------------------------------


def test_flags_parse_problemtools_flag_strings():
    assert AnswerFlags.parse("float_tolerance 1e-6 case_sensitive") == AnswerFlags(
        case_sensitive=True, float_absolute_tolerance=1e-6, float_relative_tolerance=1e-6
    )
    assert AnswerFlags.parse("") == AnswerFlags.parse(None) == DEFAULT
    assert AnswerFlags.parse(["space_change_sensitive", "float_relative_tolerance", "0.1"]) == (
        AnswerFlags(space_change_sensitive=True, float_relative_tolerance=0.1)
    )
    # a later flag overrides an earlier one, as the validator's argv loop does
    assert AnswerFlags.parse("float_absolute_tolerance 1e-3 float_tolerance 1e-6") == AnswerFlags(
        float_absolute_tolerance=1e-6, float_relative_tolerance=1e-6
    )
    assert AnswerFlags.parse("float_tolerance 1e-6 float_absolute_tolerance 1e-3") == AnswerFlags(
        float_absolute_tolerance=1e-3, float_relative_tolerance=1e-6
    )
    assert not DEFAULT.uses_floats
    assert TOL.uses_floats


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        ("float_tolerance 1e-6 ignore_case", "'ignore_case'"),
        ("case_sensitive --float", "'--float'"),
        ("float_tolerance", "'float_tolerance' needs a value"),
        ("float_tolerance abc", "'abc'"),
        ("float_absolute_tolerance inf", "'inf'"),
        ("float_relative_tolerance -1", "'-1'"),
    ],
)
def test_flags_refuse_what_the_validator_does_not_take(flags, named):
    with pytest.raises(ValueError, match=re.escape(named)):
        AnswerFlags.parse(flags)


def test_flags_refuse_a_negative_tolerance():
    with pytest.raises(ValueError, match="tolerance"):
        AnswerFlags(float_absolute_tolerance=-1.0)
