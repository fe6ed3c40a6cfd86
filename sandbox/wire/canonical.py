"""Canonical, type-exact serialisation of values crossing from the untrusted child: plain JSON
with type tags (``["int", "1f"]``, ``["tuple", [...]]``), rebuilt on the trusted side as plain
builtins and compared with ``==``; nothing is pickled. A subclass of a builtin type is read
through the base type's methods (a ``Counter`` becomes the ``dict`` it holds, a lying
``__eq__`` is ignored); anything else (custom objects, cycles, values over the budget) is
refused: a value that cannot be carried faithfully is a failed test, never a guess.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from typing import Any

MAX_DEPTH = 64
MAX_NODES = 100_000
MAX_CHARS = 1_000_000
# Keys of one set or dict that may share a hash. Int, float and tuple hashes are not salted, so
# a child can send keys that all collide: building that set costs the front time quadratic in
# their number (docs/sandbox.md, "Judging never raises"). Honest values have a few at most.
MAX_SAME_HASH = 64


class Unserialisable(Exception):
    """The value cannot be represented faithfully; the test that produced it fails."""


class _Budget:
    def __init__(self, max_nodes: int = MAX_NODES, max_chars: int = MAX_CHARS) -> None:
        self.nodes = 0
        self.chars = 0
        self.max_nodes, self.max_chars = max_nodes, max_chars
        # What a value of no builtin type becomes (``sandbox/wire/remote.py``); None: refused.
        self.other: Callable[[Any], Any] | None = None

    def spend(self, nodes: int = 1, chars: int = 0) -> None:
        self.nodes += nodes
        self.chars += chars
        if self.nodes > self.max_nodes or self.chars > self.max_chars:
            raise Unserialisable("value too large")


def canonicalise(value: Any) -> Any:
    """Encode ``value`` as tagged JSON-able data; raises ``Unserialisable``."""
    return _encode(value, _Budget(), set(), 0)


def _encode(value: Any, budget: _Budget, active: set[int], depth: int) -> Any:
    budget.spend()
    if depth > MAX_DEPTH:
        raise Unserialisable("value nested too deeply")
    kind = type(value)  # type() cannot be faked by a __class__ property
    if value is None:
        return None
    if kind is bool:  # bool cannot be subclassed, and must be checked before int
        return bool(value)
    if issubclass(kind, int):
        text = int.__format__(int.__index__(value), "x")  # hex: no str-digits limit
        budget.spend(chars=len(text))
        return ["int", text]
    if issubclass(kind, float):
        return ["float", float.__repr__(value)]
    if issubclass(kind, complex):
        real, imag = complex.real.__get__(value), complex.imag.__get__(value)
        return ["complex", [float.__repr__(real), float.__repr__(imag)]]
    if issubclass(kind, str):
        text = str.__str__(value)
        budget.spend(chars=len(text))
        return ["str", text]
    if issubclass(kind, (bytes, bytearray)):
        base = bytes if issubclass(kind, bytes) else bytearray
        text = base.hex(value)
        budget.spend(chars=len(text))
        return [base.__name__, text]
    if issubclass(kind, range):
        return [
            "range",
            [_encode(x, budget, active, depth + 1) for x in (value.start, value.stop, value.step)],
        ]
    return _encode_container(value, kind, budget, active, depth)


_CONTAINERS = (
    (list, "list", list.__iter__),
    (tuple, "tuple", tuple.__iter__),
    (set, "set", set.__iter__),
    (frozenset, "frozenset", frozenset.__iter__),
)


def _encode_container(value: Any, kind: type, budget: _Budget, active: set[int], depth: int) -> Any:
    key = id(value)
    if key in active:
        raise Unserialisable("value contains a cycle")
    active.add(key)
    try:
        if issubclass(kind, dict):
            items = [
                [_encode(k, budget, active, depth + 1), _encode(v, budget, active, depth + 1)]
                for k, v in dict.items(value)
            ]
            return ["dict", items]
        for base, tag, iterate in _CONTAINERS:
            if issubclass(kind, base):
                return [tag, [_encode(x, budget, active, depth + 1) for x in iterate(value)]]
    finally:
        active.discard(key)
    if budget.other is not None:
        return budget.other(value)
    raise Unserialisable(f"cannot carry a value of type {kind.__name__}")


def rebuild(data: Any, depth: int = 0) -> Any:
    """Rebuild plain builtins from ``canonicalise`` output, on the trusted side: every shape is
    checked. Raises ``ValueError`` if malformed, ``TypeError`` for an unhashable set member or
    dict key; any exception here fails the test."""
    if depth > MAX_DEPTH + 2:
        raise ValueError("too deep")
    if data is None or type(data) is bool:
        return data
    if type(data) is not list or len(data) != 2 or type(data[0]) is not str:
        raise ValueError(f"malformed value {str(data)[:80]}")
    tag, body = data
    return _REBUILD[tag](body, depth)


def _items(body: Any, depth: int, item: Callable[[Any, int], Any] = rebuild) -> list:
    if type(body) is not list:
        raise ValueError("malformed container")
    return [item(x, depth + 1) for x in body]


def _keys(keys: list) -> list:
    """``keys``, unless too many share one hash (see ``MAX_SAME_HASH``); hashing each once
    also raises ``TypeError`` here for an unhashable one."""
    if len(keys) > MAX_SAME_HASH and max(Counter(map(hash, keys)).values()) > MAX_SAME_HASH:
        raise ValueError("keys that share one hash")
    return keys


def _dict(body: Any, depth: int, item: Callable[[Any, int], Any] = rebuild) -> dict:
    if type(body) is not list or any(type(p) is not list or len(p) != 2 for p in body):
        raise ValueError("malformed dict")
    keys = _keys([item(k, depth + 1) for k, _ in body])
    return dict(zip(keys, [item(v, depth + 1) for _, v in body]))


def _float(text: Any, _depth: int = 0) -> float:
    if type(text) is not str:
        raise ValueError("malformed float")
    number = float(text)
    if math.isnan(number) and text not in ("nan", "-nan"):
        raise ValueError("malformed float")
    return number


def _complex(body: Any, _depth: int) -> complex:
    if type(body) is not list or len(body) != 2:
        raise ValueError("malformed complex")
    return complex(_float(body[0]), _float(body[1]))


def _text(body: Any) -> str:
    if type(body) is not str:
        raise ValueError("malformed text")
    return body


def _range(body: Any, depth: int) -> range:
    start, stop, step = _items(body, depth)
    return range(start, stop, step)


#: Containers, given what rebuilds the values they hold (``remote.py`` puts objects in them).
CONTAINERS: dict[str, Callable] = {
    "list": _items,
    "tuple": lambda b, d, item=rebuild: tuple(_items(b, d, item)),
    "set": lambda b, d, item=rebuild: set(_keys(_items(b, d, item))),
    "frozenset": lambda b, d, item=rebuild: frozenset(_keys(_items(b, d, item))),
    "dict": _dict,
}
_REBUILD = {
    "int": lambda b, d: int(_text(b), 16),
    "float": _float,
    "complex": _complex,
    "str": lambda b, d: _text(b),
    "bytes": lambda b, d: bytes.fromhex(_text(b)),
    "bytearray": lambda b, d: bytearray.fromhex(_text(b)),
    "range": _range,
    **CONTAINERS,
}
