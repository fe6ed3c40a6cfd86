"""Both sides of a split job (``split.py``): the other side's objects as proxies whose every use
asks that side.

The names the tests use and the setup code does not define are asked for once, together: a
constant comes as a value, anything else as a :class:`Remote` for the object, which stays in
the program's process; each use of it (a call, an attribute, an operator, ``len``, iteration,
``str``) is one request. A program's exception class becomes a class here of the same name and
builtin base, so ``assertRaises(BufferEmptyException)`` catches what the program raises.
"""

from __future__ import annotations

import builtins
import operator
from typing import Any

from sandbox.isolated import child
from sandbox.wire.remote import HANDLE, YOURS, builtin_base, decode, encode


class ProgramError(Exception):
    """The program's process ended, or answered what cannot be read."""


class Calls:
    """One side's end of the two pipes: it asks the other side (one request at a time) and,
    while it waits, answers the other side's requests, which a call may make (the program
    calling back a function the test handed it). ``local`` holds the objects this side handed
    over (``HANDLE``); ``names`` is the program's namespace on the program's side (None: the
    tests', where the program may only call, read a public attribute of, or apply an operator
    to what it was handed).
    """

    def __init__(
        self, send: Any, receive: Any, shared: frozenset[str], names: dict | None = None
    ) -> None:
        self.send, self.receive, self.shared = send, receive, frozenset(shared)
        self.namespace = names
        self.classes: dict[str, type] = {}  # the shared classes, once the setup code has run
        self.exceptions: dict[str, type] = {}  # the other side's exception classes, made here
        self.local: list = []
        self.kept = 0  # the objects handed over during the setup code: every test may use them

    def ask(self, request: dict) -> Any:
        self.send(request)
        while True:
            reply = self.receive()
            if type(reply) is not dict:
                raise ProgramError("the other process ended")
            if "op" not in reply:
                break
            answer = self.answer(reply)  # a call back, made by the call we wait on
            if answer is not None:
                self.send(answer)
        if "e" in reply:
            raise self.exception(reply)
        return self.decode(reply.get("v"))

    def decode(self, data: Any) -> Any:
        return decode(data, self.classes, self._handled, self.exception_type)

    def _handled(self, tag: str, number: int) -> Any:
        if tag == YOURS:
            if number >= len(self.local):
                raise ValueError("no such object")
            return self.local[number]
        return Remote(self, number)

    def arguments(self, value: Any) -> Any:
        return encode(value, self.shared, self._handle)

    def _handle(self, obj: Any) -> list:
        if type(obj) is Remote and object.__getattribute__(obj, "_calls") is self:
            return [YOURS, object.__getattribute__(obj, "_number")]
        self.local.append(obj)
        return [HANDLE, len(self.local) - 1]

    def answer(self, request: dict) -> dict | None:
        """The other side's request, answered from this side's objects (None: no answer)."""
        op = request.get("op")
        if op in ("mark", "drop"):  # the setup code has run; a test is over, its objects go
            self.kept = len(self.local) if op == "mark" else self.kept
            del self.local[self.kept :]
            return None
        try:
            return {"v": self.arguments(self._apply(op, request))}
        except BaseException as exc:
            return {"e": child._describe(exc), "base": builtin_base(type(exc))}

    def _apply(self, op: object, request: dict) -> Any:
        if op == "names" and self.namespace is not None:
            return {n: self.namespace[n] for n in request["names"] if n in self.namespace}
        if op == "apply" and (self.namespace is not None or request["fn"] != "setattr"):
            return FUNCTIONS[request["fn"]](*self.decode(request["args"]))
        target = self.local[request["h"]]
        if op == "attr" and (self.namespace is not None or not request["attr"].startswith("_")):
            return getattr(target, request["attr"])
        if op == "call":
            return target(*self.decode(request["args"]), **self.decode(request["kwargs"]))
        raise PermissionError(f"{str(op)[:20]} is not asked of the tests' process")

    def share(self, namespace: dict) -> None:
        """The shared classes are this side's of those names (defined by the setup code)."""
        self.classes.update(
            {n: namespace[n] for n in self.shared if type(namespace.get(n)) is type}
        )

    def tell(self, op: str) -> None:
        """``mark`` (the setup code has run) or ``drop`` (a test is over), on both sides."""
        self.answer({"op": op})
        self.send({"op": op})

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
    """An object of the other side's (the program's, in the tests' process; one the test
    handed over, in the program's): each use asks that side."""

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


# Operators and builtins on an object of the other side's, applied there by the ``operator``
# function or builtin of that name (``FUNCTIONS``).
ARITHMETIC = tuple("add sub mul truediv floordiv mod pow matmul lshift rshift".split())  # noqa: SIM905
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

FUNCTIONS = {name: getattr(operator, name) for name in OPERATORS}
FUNCTIONS.update({name: getattr(builtins, name) for name in BUILTINS})
# ``with`` on an object of the other side's (a mock file the test hands the program): the
# exception's class crosses, its value and traceback do not.
FUNCTIONS["enter"] = lambda obj: obj.__enter__()
FUNCTIONS["exit"] = lambda obj, kind: obj.__exit__(kind, None, None)
Remote.__enter__ = _forward("enter")
Remote.__exit__ = lambda self, kind, value, trace: _EXIT(self, kind)
_EXIT = _forward("exit")
