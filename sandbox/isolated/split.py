"""A test that is code, judged in a process the program cannot reach (docs/sandbox.md, "Tests
that are code").

Such a job runs as two processes, both forked by the zygote: the **program's process** loads
the program (and the setup code's shared classes), then only answers calls; it never receives
the tests and has no value pipe. The **tests' process** runs the setup code and each test, with
a proxy for every name of the program's they use (``proxies.py``), and alone writes records.
"""

from __future__ import annotations

import builtins
import functools
import json
from typing import Any

from sandbox.isolated import child
from sandbox.isolated.proxies import Calls

IN_FD, OUT_FD = 4, 5  # each process's call pipes: what it reads, what it writes
# One call's arguments or value as JSON; a larger frame reads as the other process gone, which
# fails the test.
FRAME_CAP = 64 * 1024 * 1024


def _send(fd: int, message: dict) -> None:
    child._send(child.frame(message), fd)


def _receive(fd: int) -> Any:
    """One framed message, or None at the end of the pipe (or a frame over the cap)."""
    header = child.read_exactly(fd, 4)
    size = int.from_bytes(header, "big") if len(header) == 4 else FRAME_CAP + 1
    body = child.read_exactly(fd, size) if size <= FRAME_CAP else b""
    return json.loads(body) if body and len(body) == size else None


def serve(job: dict) -> None:
    """Load the program, report it to the tests' process, then answer its calls until it
    closes the requests pipe; never returns."""
    try:
        namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
        exec(child._code(job["classes"], "<setup>", "exec"), namespace)  # the shared classes
        failure = child._load(job["code"], "", namespace)
        _send(OUT_FD, failure or {"t": "loaded"})
        if failure is not None:
            child._exit(0)
        calls = Calls(_SENDER, _RECEIVER, job["shared"], namespace)
        calls.share(namespace)
        while (request := _receive(IN_FD)) is not None:
            answer = calls.answer(request)
            if answer is not None:
                _send(OUT_FD, answer)
    except BaseException:
        pass
    child._exit(0)


_SENDER = functools.partial(_send, OUT_FD)
_RECEIVER = functools.partial(_receive, IN_FD)


def run_tests(job: dict) -> None:
    """Wait for the program's process to load, then run each of ``job``'s tests and write its
    record, as ``child.run`` does; never returns."""
    try:
        loaded = _receive(IN_FD)
        if type(loaded) is not dict or loaded.get("t") != "loaded":
            child._send(child.frame(_load_failure(loaded)))
            child._exit(0)
        calls = Calls(_SENDER, _RECEIVER, job["shared"])
        namespace = _setup(job["setup_code"], job["ask"], calls)
        calls.share(namespace)
        calls.tell("mark")
        child._send(child.LOADED)
        for index, part in enumerate(job["parts"]):
            scope = dict(namespace)
            child._send(child.frame(child._run_test(index, part, scope, child.CLEAN_BUILTINS)))
            calls.tell("drop")
        child._send(child.END)
    except BaseException:
        pass
    child._exit(0)


def _setup(source: child.Source, ask: list[str], calls: Calls) -> dict:
    """The tests' namespace: the program's values of the names the setup code and tests use
    and do not bind (``ask``), then the setup code run over them, with ``__program__(name)``
    for a name taken from an import of the solution's module. A setup code that fails is
    reported as the load's failure."""
    namespace: dict[str, Any] = {"__name__": "tests", "__builtins__": builtins}
    try:
        code = child._code(source, "<setup>", "exec")
        namespace.update(calls.names(ask))
        namespace["__program__"] = functools.partial(_program_name, calls)
        exec(code, namespace)
    except BaseException as exc:
        child._send(child.frame({"t": "load_error", **child._describe(exc)}))
        child._exit(0)
    return namespace


def _program_name(calls: Calls, name: str) -> Any:
    found = calls.names([name])
    if name not in found:
        raise ImportError(f"cannot import name {name!r} from the program")
    return found[name]


def _load_failure(loaded: Any) -> dict:
    """The program's own report of why it did not load, or that it broke its channel."""
    if type(loaded) is dict and loaded.get("t") == "load_error":
        kind, exc = str(loaded.get("kind"))[:20], str(loaded.get("exc", ""))[:300]
        return {"t": "load_error", "kind": kind, "exc": exc}  # an unknown kind fails it
    return {"t": "load_error", "kind": "runtime", "exc": "the program's process ended"}


def payloads(payload: dict, job: dict) -> tuple[dict, dict]:
    """The program's job (the program and the setup code's shared classes) and the tests'
    (the setup code and the tests), from one compiled job, each for its own job pipe."""
    shared = job["shared"]
    tests = {**payload, "code": "", "tests": True, "shared": shared, "ask": job["ask"]}
    program = {**payload, "setup_code": "", "parts": [], "split": True, "shared": shared}
    program["classes"] = child._dataset_code(job["classes"], "<setup>", "exec")
    return program, tests
