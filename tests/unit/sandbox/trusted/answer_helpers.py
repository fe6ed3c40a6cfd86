"""What the tests of sandbox/trusted/answers.py share: flag sets and ways to cut a stream."""

from __future__ import annotations

import random
from collections.abc import Iterator

from sandbox.trusted.answers import AnswerComparison, AnswerFlags, compare_bytes

DEFAULT = AnswerFlags()
SPACE = AnswerFlags(space_change_sensitive=True)
CASE = AnswerFlags(case_sensitive=True)
TOL = AnswerFlags.parse("float_tolerance 1e-6")


def check(output: bytes, answer: bytes, flags: AnswerFlags = DEFAULT) -> AnswerComparison:
    return compare_bytes(output, answer, flags)


def cut(data: bytes, size: int) -> Iterator[bytes]:
    return (data[i : i + size] for i in range(0, len(data), size))


def random_cut(data: bytes, rng: random.Random) -> list[bytes]:
    if len(data) < 2:
        return [data] if data else []
    cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(0, 12))))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])]
