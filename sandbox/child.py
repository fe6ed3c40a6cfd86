"""The harness inside the untrusted child: run the program, compute what the tests need.

It only ever *reports*: ``loaded`` once the program and setup code ran, one ``test`` record
per test (canonical values, or for ``exec``-form tests whether the statement raised) and
``end``. The verdict is decided elsewhere, from these records and from what the worker saw
happen to the process; nothing the child prints or returns as an exit code counts. Records go
to a dedicated pipe (fd 3) as length-prefixed JSON.
"""

from __future__ import annotations

import builtins
import json.encoder
import os
import struct
from typing import Any

from sandbox.canonical import Unserialisable, canonicalise

VALUE_FD = 3
_write = os.write
_pack = struct.pack
_exit = os._exit
# Made once in the worker, before any fork: copying the builtins dict in every child would
# touch (and so copy-on-write) the pages of ~160 builtin objects per execution.
CLEAN_BUILTINS = dict(builtins.__dict__)


def _not_json(value: object) -> None:
    raise TypeError(f"{type(value).__name__} is not JSON data")


# json's C encoder, made once: json.dumps builds one (and runs its Python) on every call.
_encode = json.encoder.c_make_encoder(
    None, _not_json, json.encoder.encode_basestring_ascii, None, ":", ",", False, False, True
)


def frame(record: dict) -> bytes:
    """A record as the server reads it: length-prefixed JSON."""
    data = "".join(_encode(record, 0)).encode()
    return _pack(">I", len(data)) + data


def _send(data: bytes) -> None:
    while data:
        data = data[_write(VALUE_FD, data) :]


# The two records every execution sends, framed once, before any fork.
LOADED = frame({"t": "loaded"})
END = frame({"t": "end"})


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
        failure = _load(code, setup_code, namespace)
        if failure is not None:
            _send(frame(failure))
            _exit(0)
        _send(LOADED)
        for index, part in enumerate(parts):
            _send(frame(_run_test(index, part, namespace, clean_builtins)))
        _send(END)
    except BaseException:
        pass
    _exit(0)
