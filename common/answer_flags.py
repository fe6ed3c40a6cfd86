"""The flags of the Kattis default output validator, and the numbers it reads.

A problem's data (``problem.yaml``'s ``validator_flags``, ``testdata.yaml``'s
``output_validator_flags``), checked where problems are loaded (``common/packages.py``) so that
a bad flag names its file, and applied where outputs are judged
(``sandbox/trusted/answers.py``, which says what each flag means).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

# The numbers sscanf("%lf") reads in full (inf and nan are refused after it, so left out).
_DECIMAL = re.compile(rb"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_HEX = re.compile(rb"[+-]?0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)(?:[pP][+-]?[0-9]+)?")
_TOLERANCES = ("float_tolerance", "float_absolute_tolerance", "float_relative_tolerance")


def parse_number(token: bytes) -> float | None:
    """The token's value when the validator reads it as a number, else None."""
    try:
        if _DECIMAL.fullmatch(token):
            value = float(token)
        elif _HEX.fullmatch(token):
            value = float.fromhex(token.decode("ascii"))
        else:
            return None
    except (OverflowError, ValueError):  # fromhex refuses what overflows; strtod gives inf
        return None
    return value if math.isfinite(value) else None


@dataclass(frozen=True)
class AnswerFlags:
    """The default output validator's flags. A tolerance of None is unset."""

    case_sensitive: bool = False
    space_change_sensitive: bool = False
    float_absolute_tolerance: float | None = None
    float_relative_tolerance: float | None = None

    def __post_init__(self) -> None:
        for tolerance in (self.float_absolute_tolerance, self.float_relative_tolerance):
            if tolerance is not None and not (math.isfinite(tolerance) and tolerance >= 0):
                raise ValueError(f"a float tolerance must be finite and >= 0, not {tolerance}")

    @property
    def uses_floats(self) -> bool:
        return (self.float_absolute_tolerance, self.float_relative_tolerance) != (None, None)

    @classmethod
    def parse(cls, flags: str | Sequence[str] | None) -> AnswerFlags:
        """Flags as problemtools passes them to the validator: ``"float_tolerance 1e-6
        case_sensitive"`` (``validator_flags``, ``output_validator_flags``), or those words as a
        list. An unknown flag, a missing value or a value that is not a number >= 0 raises
        ValueError naming it."""
        if flags is None:
            words: list[str] = []
        elif isinstance(flags, str):
            words = flags.split()
        else:
            words = [word for item in flags for word in item.split()]
        found: dict[str, object] = {}
        at = 0
        while at < len(words):
            word = words[at]
            if word in ("case_sensitive", "space_change_sensitive"):
                found[word] = True
            elif word in _TOLERANCES:
                if at + 1 == len(words):
                    raise ValueError(f"output validator flag {word!r} needs a value")
                at += 1
                value = parse_number(words[at].encode())
                if value is None or value < 0:
                    raise ValueError(f"{word} {words[at]!r}: not a number >= 0")
                if word != "float_relative_tolerance":
                    found["float_absolute_tolerance"] = value
                if word != "float_absolute_tolerance":
                    found["float_relative_tolerance"] = value
            else:
                raise ValueError(
                    f"unknown output validator flag {word!r} (the default validator takes "
                    f"case_sensitive, space_change_sensitive and {', '.join(_TOLERANCES)})"
                )
            at += 1
        return cls(**found)
