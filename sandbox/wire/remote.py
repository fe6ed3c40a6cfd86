"""Values between a test's process and the program's (``sandbox/isolated/split.py``): canonical
values, plus objects of a shared class (one the setup code defines: ``ListNode``) by value, as
a table of objects that values point into by index (shared or cyclic links survive); a builtin
type, an exception class or a ``datetime`` by name and fields; any other object as a *handle*,
its number in the table of the side that keeps it (``yours`` when handed back). Decoding builds
only plain builtins, instances of the receiver's shared classes (made with ``object.__new__``:
no constructor of the sender's runs) and handles; every shape is checked.
"""

from __future__ import annotations

import builtins
import datetime as dt
from collections.abc import Callable
from typing import Any

from sandbox.wire.canonical import CONTAINERS, MAX_DEPTH, Unserialisable, _Budget, _encode
from sandbox.wire.canonical import rebuild as rebuild_plain

OBJ, GRAPH, TYPE, ERROR, TIME = "obj", "graph", "type", "exception", "datetime"
# An object kept by the side that sends it, or one the receiver lent before: by its number in
# that side's table (``proxies.Calls.local``).
HANDLE, YOURS = "handle", "yours"
# One call's arguments or value between two sandboxed processes: a test may pass a list of a
# million (the front's bound, ``canonical.MAX_NODES``, is for what it must hold).
CALL_NODES, CALL_CHARS = 10_000_000, 64_000_000
_TIMES = {cls.__name__: cls for cls in (dt.date, dt.datetime, dt.time, dt.timedelta)}


def _attributes(value: Any) -> dict | None:
    """An object's own attribute dict (a plain ``dict``), or None (slots, no dict)."""
    try:
        attrs = object.__getattribute__(value, "__dict__")
    except AttributeError:
        return None
    return attrs if type(attrs) is dict else None


def encode(value: Any, shared: frozenset[str], handle: Callable[[Any], list] | None) -> Any:
    """``value`` as canonical data, objects of ``shared`` classes by value, any other object as
    ``handle(obj)`` makes it (``[HANDLE, n]`` or ``[YOURS, n]``; None: refused); raises
    ``Unserialisable``."""
    objects: list = []
    index: dict[int, int] = {}

    def other(obj: Any) -> list:
        if type(obj) is type and getattr(builtins, obj.__name__, None) is obj:
            return [TYPE, obj.__name__]  # ``int``, as a function's annotations hold it
        if isinstance(obj, type) and issubclass(obj, BaseException):
            return [ERROR, [obj.__name__, builtin_base(obj)]]
        if type(obj).__name__ in _TIMES and type(obj) is _TIMES[type(obj).__name__]:
            return [TIME, [type(obj).__name__, _time_fields(obj)]]
        if type(obj).__name__ in shared and _attributes(obj) is not None:
            number = index.get(id(obj))
            if number is None:
                number = index[id(obj)] = len(objects)
                objects.append(obj)  # held: ids stay unique while this runs
            return [OBJ, number]
        if handle is None:
            raise Unserialisable(f"cannot carry a value of type {type(obj).__name__}")
        return handle(obj)

    budget = _Budget(CALL_NODES, CALL_CHARS)
    budget.other = other
    root = _encode(value, budget, set(), 0)
    if not objects:
        return root
    table = []
    for obj in objects:  # grows while attributes reach more objects
        attrs = [
            [name, _encode(item, budget, set(), 0)]
            for name, item in dict.items(_attributes(obj))
            if type(name) is str
        ]
        table.append([type(obj).__name__, attrs])
    return [GRAPH, [root, table]]


def builtin_base(kind: type) -> str:
    """The nearest builtin class among an exception class's bases (``Exception`` at least)."""
    return next((c.__name__ for c in kind.__mro__ if c.__module__ == "builtins"), "Exception")


def _time_fields(value: Any) -> list:
    if type(value) is dt.timedelta:
        return [value.days, value.seconds, value.microseconds]
    return [value.isoformat()]


def _time(body: Any) -> Any:
    if type(body) is not list or len(body) != 2 or body[0] not in _TIMES:
        raise ValueError("malformed datetime")
    kind, fields = _TIMES[body[0]], body[1]
    if type(fields) is not list or not all(type(f) in (int, str) for f in fields):
        raise ValueError("malformed datetime")
    return kind(*fields) if kind is dt.timedelta else kind.fromisoformat(*fields)


def decode(
    data: Any,
    classes: dict[str, type],
    handle: Callable[[str, int], Any],
    exception: Callable[[str, str], type] | None = None,
) -> Any:
    """Values from :func:`encode`'s data: ``classes`` the receiver's shared classes by name,
    ``handle(tag, n)`` what a ``HANDLE`` or ``YOURS`` stands for here, ``exception`` the class
    here for an exception class of the sender's (None: refused); raises ``ValueError`` if
    malformed."""
    if type(data) is not list or len(data) != 2 or data[0] != GRAPH:
        return _Decoder([], handle, exception).value(data, 0)
    body = data[1]
    if type(body) is not list or len(body) != 2 or type(body[1]) is not list:
        raise ValueError("malformed graph")
    root, table = body
    if len(table) > CALL_NODES:
        raise ValueError("too many objects")
    shells = [_shell(entry, classes) for entry in table]
    decoder = _Decoder(shells, handle, exception)
    for shell, (_, attrs) in zip(shells, table):
        if type(attrs) is not list:
            raise ValueError("malformed attributes")
        for pair in attrs:
            if type(pair) is not list or len(pair) != 2 or not _attribute_name(pair[0]):
                raise ValueError("malformed attribute")
            object.__getattribute__(shell, "__dict__")[pair[0]] = decoder.value(pair[1], 0)
    return decoder.value(root, 0)


def _attribute_name(name: Any) -> bool:
    return type(name) is str and name.isidentifier() and not name.startswith("__")


def _shell(entry: Any, classes: dict[str, type]) -> Any:
    """An instance of the receiver's class of that name, with no constructor run."""
    if type(entry) is not list or len(entry) != 2 or type(entry[0]) is not str:
        raise ValueError("malformed object")
    cls = classes.get(entry[0])
    if cls is None:
        raise ValueError(f"no shared class {entry[0][:40]!r} here")
    shell = object.__new__(cls)
    if _attributes(shell) is None:
        raise ValueError(f"class {entry[0][:40]!r} has no attribute dict")
    return shell


class _Decoder:
    """Containers rebuilt here, so that objects and handles may sit inside them; every other
    tag by ``canonical.rebuild``."""

    def __init__(self, shells: list, handle: Callable, exception: Callable | None) -> None:
        self.shells, self.handle, self.exception = shells, handle, exception

    def value(self, data: Any, depth: int) -> Any:
        if depth > MAX_DEPTH + 2:
            raise ValueError("too deep")
        if type(data) is not list or len(data) != 2 or type(data[0]) is not str:
            return rebuild_plain(data, depth)
        tag, body = data
        if tag == TIME:
            return _time(body)
        if tag == ERROR:
            if self.exception is None or type(body) is not list or len(body) != 2:
                raise ValueError("malformed exception class")
            if not all(type(part) is str and part.isidentifier() for part in body):
                raise ValueError("malformed exception class")
            return self.exception(*body)
        if tag == TYPE:
            kind = getattr(builtins, body, None) if type(body) is str else None
            if type(kind) is not type:
                raise ValueError("malformed type")
            return kind
        if tag in (OBJ, HANDLE, YOURS):
            if type(body) is not int or body < 0:
                raise ValueError(f"malformed {tag}")
            if tag != OBJ:
                return self.handle(tag, body)
            if body >= len(self.shells):
                raise ValueError("object out of range")
            return self.shells[body]
        if tag in CONTAINERS:
            return CONTAINERS[tag](body, depth, self.value)
        return rebuild_plain(data, depth)
