"""The harness inside the untrusted child: run the program, compute what the tests need.

It only ever *reports*: ``loaded`` once the program and setup code ran, one ``test`` record
per test (canonical values, or for ``exec``-form tests whether the statement raised) and
``end``. The verdict is decided elsewhere, from these records and from what the worker saw
happen to the process; nothing the child prints or returns as an exit code counts. Records go
to a dedicated pipe (fd 3) as length-prefixed JSON.
"""

from __future__ import annotations

import builtins
import json
import os
import struct
import sys
from typing import Any

from sandbox.canonical import Unserialisable, canonicalise

VALUE_FD = 3
_write = os.write
_dumps = json.dumps
_pack = struct.pack
_exit = os._exit
# Made once in the worker, before any fork: copying the builtins dict in every child would
# touch (and so copy-on-write) the pages of ~160 builtin objects per execution.
CLEAN_BUILTINS = dict(builtins.__dict__)


def _send(record: dict) -> None:
    data = _dumps(record).encode()
    data = _pack(">I", len(data)) + data
    while data:
        data = data[_write(VALUE_FD, data) :]


def _describe(exc: BaseException) -> dict:
    """Classify an exception without trusting it (its __str__ is candidate code)."""
    kind = "memory" if isinstance(exc, MemoryError) else "runtime"
    if isinstance(exc, AssertionError):
        kind = "assert"
    elif isinstance(exc, Unserialisable):
        kind = "unserialisable"
    try:
        name = type.__dict__["__name__"].__get__(type(exc))
        message = str(exc)[:200]
    except BaseException:
        name, message = "exception", ""
    return {"kind": kind, "exc": f"{name}: {message}"[:300]}


def _load(code: str, setup_code: str, namespace: dict) -> dict | None:
    try:
        program = compile(code, "<candidate>", "exec")
    except (SyntaxError, ValueError, OverflowError, RecursionError, MemoryError) as exc:
        return {"t": "load_error", "kind": "syntax", "exc": f"{type(exc).__name__}: {exc}"[:300]}
    try:
        exec(program, namespace)
        if setup_code:
            exec(compile(setup_code, "<setup>", "exec"), namespace)
    except BaseException as exc:  # SystemExit included: the program ended before the tests
        return {"t": "load_error", **_describe(exc)}
    return None


def _run_test(index: int, part: dict, namespace: dict, clean_builtins: dict) -> dict:
    try:
        if part["kind"] == "exec":
            exec(compile(part["src"], "<test>", "exec"), namespace)
            return {"t": "test", "i": index, "ok": True}
        scope = dict(namespace)
        scope["__builtins__"] = clean_builtins  # builtins patched by the program do not apply
        values = [
            canonicalise(eval(compile(src, "<test>", "eval"), scope)) for src in part["exprs"]
        ]
        return {"t": "test", "i": index, "values": values}
    except BaseException as exc:
        return {"t": "test", "i": index, **_describe(exc)}


def run(code: str, setup_code: str, parts: list[dict]) -> None:
    """Run the program and the tests' child parts; never returns."""
    try:
        clean_builtins = CLEAN_BUILTINS
        namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
        sys.argv = ["<candidate>"]
        failure = _load(code, setup_code, namespace)
        if failure is not None:
            _send(failure)
            _exit(0)
        _send({"t": "loaded"})
        for index, part in enumerate(parts):
            _send(_run_test(index, part, namespace, clean_builtins))
        _send({"t": "end"})
    except BaseException:
        pass
    _exit(0)
