"""The tests' side of a split job (``sandbox/isolated/split.py``): the program's names and
objects as proxies whose every use asks the program's process.

A name the tests use and the setup code does not define is asked for once, all together, before
the setup code runs: a value (a constant) comes as a value, anything else (a function, a class,
an instance) as a :class:`Remote` for the object, which stays in the program's process. Using a
``Remote`` (calling it, reading or setting an attribute, an operator, ``len``, iterating it,
``str``) sends one request. An exception class of the program's becomes a class here of the same
name and builtin base, so ``assertRaises(BufferEmptyException)`` catches what the program
raises. What cannot cross: a function of the tests' passed to the program (a callback), which
fails that test.
"""

from __future__ import annotations

import builtins
from typing import Any

from sandbox.wire.remote import decode, encode


class ProgramError(Exception):
    """The program's process ended, or answered what cannot be read."""


class Calls:
    """The tests' end of the two pipes: one request at a time, each answered."""

    def __init__(self, send: Any, receive: Any, shared: frozenset[str]) -> None:
        self.send, self.receive, self.shared = send, receive, shared
        self.classes: dict[str, type] = {}  # the setup code's shared classes, once it has run
        self.exceptions: dict[str, type] = {}  # the program's exception classes, made here

    def ask(self, request: dict) -> Any:
        self.send(request)
        reply = self.receive()
        if type(reply) is not dict:
            raise ProgramError("the program's process ended")
        if "e" in reply:
            raise self.exception(reply)
        return decode(reply.get("v"), self.classes, self.remote, self.exception_type)

    def remote(self, number: int) -> Remote:
        return Remote(self, number)

    def arguments(self, value: Any) -> Any:
        def handle(obj: Any) -> int:
            if type(obj) is not Remote:
                raise TypeError(f"cannot pass a {type(obj).__name__} to the program")
            return object.__getattribute__(obj, "_number")

        return encode(value, self.shared, handle)

    def names(self, wanted: list[str]) -> dict[str, Any]:
        """The program's values of those of ``wanted`` it defines."""
        found = self.ask({"op": "names", "names": sorted(wanted)})
        return found if type(found) is dict else {}

    def apply(self, function: str, *args: Any) -> Any:
        return self.ask({"op": "apply", "fn": function, "args": self.arguments(list(args))})

    def exception_type(self, name: str, base: str) -> type:
        """The class here that stands for the program's exception class ``name``."""
        kind = getattr(builtins, name, None)
        if isinstance(kind, type) and issubclass(kind, BaseException):
            return kind
        if name not in self.exceptions:
            parent = getattr(builtins, base, None)
            if not (isinstance(parent, type) and issubclass(parent, Exception)):
                parent = ProgramError
            self.exceptions[name] = type(name, (parent,), {"__module__": "program"})
        return self.exceptions[name]

    def exception(self, reply: dict) -> BaseException:
        """The program's exception as the test sees it: of the class that stands for it here
        (a test may expect a ``ValueError``, or the program's own ``BufferEmptyException``)."""
        error = reply["e"] if type(reply.get("e")) is dict else {}
        text = str(error.get("exc", ""))
        name, _, message = text.partition(": ")
        if not name.isidentifier():
            return ProgramError(text or "the program's answer was garbled")
        kind = self.exception_type(name, str(reply.get("base", "")))
        if kind is SystemExit or not issubclass(kind, Exception):
            return ProgramError(text)  # never end the tests' process on the program's word
        return kind(message)


class Remote:
    """An object of the program's, in the tests' process: each use asks the program's."""

    __slots__ = ("_calls", "_number")

    def __init__(self, calls: Calls, number: int) -> None:
        object.__setattr__(self, "_calls", calls)
        object.__setattr__(self, "_number", number)

    def _ask(self, op: str, **fields: Any) -> Any:
        calls = object.__getattribute__(self, "_calls")
        return calls.ask({"op": op, "h": object.__getattribute__(self, "_number"), **fields})

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        calls = object.__getattribute__(self, "_calls")
        return self._ask("call", args=calls.arguments(list(args)), kwargs=calls.arguments(kwargs))

    def __getattr__(self, name: str) -> Any:  # ``f.__annotations__`` too
        return self._ask("attr", attr=name)

    def __setattr__(self, name: str, value: Any) -> None:
        object.__getattribute__(self, "_calls").apply("setattr", self, name, value)

    def __iter__(self):
        return iter(object.__getattribute__(self, "_calls").apply("list", self))

    def __repr__(self) -> str:
        try:
            return str(object.__getattribute__(self, "_calls").apply("repr", self))
        except Exception:
            return "<an object of the program's>"


def _forward(function: str, reflected: bool = False) -> Any:
    def method(self: Remote, *args: Any) -> Any:
        calls = object.__getattribute__(self, "_calls")
        operands = (*args, self) if reflected else (self, *args)
        return calls.apply(function, *operands)

    return method


# Operators and builtins on a program's object, applied in the program's process by the
# ``operator`` function or builtin of that name (``split.FUNCTIONS``).
ARITHMETIC = (
    "add",
    "sub",
    "mul",
    "truediv",
    "floordiv",
    "mod",
    "pow",
    "matmul",
    "lshift",
    "rshift",
)
BITWISE = ("and_", "or_", "xor")  # __and__ -> operator.and_
UNARY_AND_OTHERS = ("eq", "ne", "lt", "le", "gt", "ge", "neg", "pos", "abs", "invert", "index")
ITEMS = ("contains", "getitem", "setitem", "delitem")
OPERATORS = ARITHMETIC + BITWISE + UNARY_AND_OTHERS + ITEMS
BUILTINS = ("len", "hash", "bool", "str", "repr", "int", "float", "list", "setattr")

for _name in ARITHMETIC + BITWISE:
    _method = _name.rstrip("_")
    setattr(Remote, f"__{_method}__", _forward(_name))
    setattr(Remote, f"__r{_method}__", _forward(_name, reflected=True))
for _name in UNARY_AND_OTHERS + ITEMS + ("len", "hash", "bool", "str", "int", "float"):
    setattr(Remote, f"__{_name}__", _forward(_name))
