"""Canonical values (``sandbox/wire/canonical.py``): what a program returns crosses to the trusted
side as plain data, and only plain data comes back."""

from __future__ import annotations

from collections import Counter, OrderedDict, defaultdict, namedtuple

import pytest

from sandbox.wire.canonical import Unserialisable, canonicalise, rebuild


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
