"""A test that is code, judged in a process the program cannot reach.

A ``check`` function with a loop, a test that builds its input with the dataset's helpers
(LeetCode's ``list_node``), any test the trusted side cannot judge from values alone, used to
run in the program's own process, which could patch the harness or read the test's expected
values. For such a job the execution's child forks once, before any program code runs:

- the **program's process** loads the program and then only answers calls: it never receives
  the tests (they follow its job in the job pipe, and only the tests' process reads them), and
  its value pipe is closed before the program runs, so it cannot write a record;
- the **tests' process** runs the setup code and each test, with a proxy (:class:`Remote`) for
  every name the program defines; a call crosses as values (``sandbox/wire/remote.py``), an
  object the program keeps (a ``Solution()``) as a handle, dropped after each test, so every
  test starts from fresh instances. It alone writes the records, as the harness does.

The tests' process is the program's child, non-dumpable as every process of the sandbox: the
program can kill it (its tests then fail), not read or trace it. Descriptors, in both: 5 and 6
the requests (the program reads 5, the tests write 6), 7 and 8 the replies (the program
writes 8, the tests read 7); 4 is ``/dev/null``, which becomes stdin once the job is read.
"""

from __future__ import annotations

import builtins
import json
import os
import types
from typing import Any

from sandbox.isolated import child
from sandbox.wire.remote import decode, encode

DEVNULL_FD = 4
FRAME_CAP = 64 * 1024 * 1024  # one call's arguments or value: canonical values are capped far lower
_PROGRAM_GONE = "the program's process ended"


def fork() -> bool:
    """In the execution's child, its job read and descriptors 0-4 placed: fork the tests'
    process; True there, False in the program's. Each closes what the other holds."""
    request_r, request_w = os.pipe()  # 5, 6: the lowest free descriptors
    reply_r, reply_w = os.pipe()  # 7, 8
    if os.fork() == 0:
        os.close(request_r)
        os.close(reply_w)
        return True
    for fd in (request_w, reply_r, child.VALUE_FD):
        os.close(fd)
    os.dup2(DEVNULL_FD, 0)  # the tests wait behind the job in the job pipe: never read here
    os.close(DEVNULL_FD)
    return False


def _send(fd: int, message: dict) -> None:
    data = child.frame(message)
    while data:
        data = data[os.write(fd, data) :]


def _read(fd: int, size: int) -> bytes | None:
    chunks = []
    while size > 0:
        chunk = os.read(fd, min(size, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _receive(fd: int) -> Any:
    """One framed message, or None at the end of the pipe (or a frame over the cap)."""
    header = _read(fd, 4)
    size = int.from_bytes(header, "big") if header else FRAME_CAP + 1
    body = _read(fd, size) if size <= FRAME_CAP else None
    return None if body is None else json.loads(body)


# ---- the program's process ---------------------------------------------------------------------


def serve(job: dict) -> None:
    """Load the program, report it to the tests' process, then answer its calls until it
    closes the requests pipe; never returns."""
    try:
        namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
        failure = child._load(job["code"], job["setup_code"], namespace)
        _send(8, failure or {"t": "loaded"})
        if failure is not None:
            child._exit(0)
        shared = frozenset(job["shared"])
        handles: list = []
        while (request := _receive(5)) is not None:
            if request.get("op") == "drop":  # the test is over: its objects go
                handles.clear()
                continue
            _send(8, _answer(request, namespace, handles, shared))
    except BaseException:
        pass
    child._exit(0)


def _answer(request: dict, namespace: dict, handles: list, shared: frozenset[str]) -> dict:
    def keep(obj: Any) -> int:
        handles.append(obj)
        return len(handles) - 1

    classes = {name: namespace[name] for name in shared if isinstance(namespace.get(name), type)}
    try:
        if "name" in request:
            name = request["name"]
            if name not in namespace:
                raise NameError(f"name {name!r} is not defined")
            target = namespace[name]
        else:
            target = handles[request["h"]]
        if request["op"] == "attr":
            result = getattr(target, request["attr"])
        else:
            args = decode(request["args"], classes, handles.__getitem__)
            kwargs = decode(request["kwargs"], classes, handles.__getitem__)
            result = target(*args, **kwargs)
        return {"v": encode(result, shared, keep)}
    except BaseException as exc:
        return {"e": child._describe(exc)}


# ---- the tests' process --------------------------------------------------------------------------


class ProgramError(Exception):
    """The program raised an exception that is not a builtin one (or its process ended)."""


class _Calls:
    """The tests' end of the two pipes: one call at a time, each answered."""

    def __init__(self, classes: dict[str, type], shared: frozenset[str]) -> None:
        self.classes, self.shared = classes, shared

    def ask(self, request: dict) -> Any:
        _send(6, request)
        reply = _receive(7)
        if type(reply) is not dict:
            raise ProgramError(_PROGRAM_GONE)
        if "e" in reply:
            raise _exception(reply["e"])
        return decode(reply.get("v"), self.classes, lambda number: Remote(self, {"h": number}))

    def arguments(self, value: Any) -> Any:
        def handle(obj: Any) -> int:
            target = object.__getattribute__(obj, "_target") if type(obj) is Remote else None
            if target is None or "h" not in target:
                raise TypeError(f"cannot pass a {type(obj).__name__} to the program")
            return target["h"]

        return encode(value, self.shared, handle)


def _exception(error: Any) -> BaseException:
    """The program's exception as the test sees it: a builtin one of the same type (a test may
    expect a ``ValueError``), anything else a :class:`ProgramError`."""
    text = str(error.get("exc", "")) if type(error) is dict else ""
    name, _, message = text.partition(": ")
    kind = getattr(builtins, name, None)
    if isinstance(kind, type) and issubclass(kind, Exception) and kind.__module__ == "builtins":
        return kind(message)
    return ProgramError(text or "the program's answer was garbled")


class Remote:
    """A name the program defines, or an object it keeps, in the tests' process: calling it or
    reading an attribute asks the program's process."""

    __slots__ = ("_calls", "_target")

    def __init__(self, calls: _Calls, target: dict) -> None:
        object.__setattr__(self, "_calls", calls)
        object.__setattr__(self, "_target", target)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        calls = object.__getattribute__(self, "_calls")
        request = {"op": "call", **object.__getattribute__(self, "_target")}
        request["args"], request["kwargs"] = calls.arguments(list(args)), calls.arguments(kwargs)
        return calls.ask(request)

    def __getattr__(self, name: str) -> Any:  # ``f.__annotations__`` too
        calls = object.__getattribute__(self, "_calls")
        return calls.ask({"op": "attr", "attr": name, **object.__getattribute__(self, "_target")})


def _names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if type(const) is types.CodeType:
            names |= _names(const)
    return names


def run_tests(job: dict) -> None:
    """Wait for the program's process to load, then run each of ``job``'s tests (read after
    the program's job, from the job pipe) and write its record, as ``child.run`` does; never
    returns."""
    try:
        os.dup2(DEVNULL_FD, 0)
        os.close(DEVNULL_FD)
        loaded = _receive(7)
        if type(loaded) is not dict or loaded.get("t") != "loaded":
            child._send(child.frame(_load_failure(loaded)))
            child._exit(0)
        namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
        failure = child._load("", job["setup_code"], namespace)
        if failure is not None:
            child._send(child.frame(failure))
            child._exit(0)
        shared = frozenset(job["shared"])
        calls = _Calls(
            {n: namespace[n] for n in shared if isinstance(namespace.get(n), type)}, shared
        )
        child._send(child.LOADED)
        for index, part in enumerate(job["parts"]):
            scope = dict(namespace)
            for name in _part_names(part) - scope.keys() - builtins.__dict__.keys():
                scope[name] = Remote(calls, {"name": name})
            child._send(child.frame(child._run_test(index, part, scope, child.CLEAN_BUILTINS)))
            _send(6, {"op": "drop"})
        child._send(child.END)
    except BaseException:
        pass
    child._exit(0)


def _part_names(part: dict) -> set[str]:
    mode = "exec" if part["kind"] == "exec" else "eval"
    names: set[str] = set()
    for source in [part["src"]] if mode == "exec" else part["exprs"]:
        names |= _names(child._code(source, "<test>", mode))
    return names


def _load_failure(loaded: Any) -> dict:
    """The program's own report of why it did not load, or that it broke its channel."""
    if type(loaded) is dict and loaded.get("t") == "load_error":
        kind, exc = str(loaded.get("kind"))[:20], str(loaded.get("exc", ""))[:300]
        return {"t": "load_error", "kind": kind, "exc": exc}  # an unknown kind fails it
    return {"t": "load_error", "kind": "runtime", "exc": _PROGRAM_GONE}


def payloads(payload: dict, shared: list[str]) -> tuple[dict, dict]:
    """The program's job (no tests) and the tests' (no program), from one compiled job: the
    worker's server writes the second after the first into the job pipe."""
    tests = {"setup_code": payload["setup_code"], "parts": payload["parts"], "shared": shared}
    return {**payload, "parts": [], "split": True, "shared": shared}, tests
