"""The harness inside the untrusted child: run the program, compute what the tests need.

The program, setup code and tests usually arrive compiled by the worker's server, where the
compiler is warm (:func:`precompiled`); a source the server did not compile is compiled here.
The child only ever *reports*, on fd 3 as length-prefixed JSON: ``loaded`` once the program
and setup code ran, one ``test`` record per test (canonical values, or whether an ``exec``
test raised, and whether an ``AssertionError`` came from the test's own statement) and
``end``. The verdict is decided on the trusted side; nothing the child prints or exits with
counts.
"""

from __future__ import annotations

import builtins
import functools
import io
import json.encoder
import os
import struct
import sys
import types
import warnings
from typing import Any

from sandbox.wire.canonical import Unserialisable, canonicalise

VALUE_FD = 3
_write = os.write
_pack = struct.pack
_exit = os._exit
# Made once in the worker: copied in every child, the builtins dict would copy-on-write the
# pages of every builtin object.
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


def _send(data: bytes, fd: int = VALUE_FD) -> None:
    while data:
        data = data[_write(fd, data) :]


def read_exactly(fd: int, size: int) -> bytes:
    """``size`` bytes of a pipe (fewer only if its writer closed it early)."""
    chunks = []
    while size > 0 and (chunk := os.read(fd, min(size, 1 << 16))):
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


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


Source = str | types.CodeType  # text, or already compiled by the server
# CPython's compile time is superlinear in some sources (docs/sandbox.md, "Process layout"):
# larger programs compile in the child, under its limits, not in the trusted server.
SERVER_COMPILE_MAX = 16 * 1024


def _code(source: Source, filename: str, mode: str) -> types.CodeType:
    """``source`` compiled as ``python FILE`` would: no ``__future__`` flag of this module.
    Already compiled (by :func:`precompiled`), it is returned as it is."""
    if type(source) is types.CodeType:
        return source
    return compile(source, filename, mode, dont_inherit=True)


# What compiling a program can raise; each makes it a ``syntax_error`` (in the child too).
COMPILE_ERRORS = (SyntaxError, ValueError, OverflowError, RecursionError, MemoryError)


def _syntax_error(exc: BaseException) -> dict:
    return {"t": "load_error", "kind": "syntax", "exc": f"{type(exc).__name__}: {exc}"[:300]}


def _quiet_compile(source: str, filename: str, mode: str) -> types.CodeType:
    """Compiled in the server: its compile-time warnings are not printed (into the pool's
    stderr, which the server shares)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _code(source, filename, mode)


@functools.lru_cache(maxsize=4096)
def _dataset_code(source: str, filename: str, mode: str) -> Source:
    """A test's or the setup's code (the dataset's, shared by a group's G completions) compiled,
    or its text if it does not compile: the child then fails to compile it and reports why."""
    try:
        return _quiet_compile(source, filename, mode)
    except Exception:
        return source


def precompiled(code: str, setup_code: str, parts: list[dict]) -> dict:
    """A job's program, setup code and test parts with code objects where they compile (in the
    worker's server). A program that does not compile gets ``load_error``, the record its
    child would have sent, and needs no fork. Compiling runs nothing, so it is safe in the
    trusted server; up to ``SERVER_COMPILE_MAX``, a larger one is compiled in the child."""
    compiled: list[dict] = []
    for part in parts:
        if part["kind"] == "exec":
            compiled.append({**part, "src": _dataset_code(part["src"], "<test>", "exec")})
        else:
            exprs = [_dataset_code(e, "<test>", "eval") for e in part["exprs"]]
            compiled.append({**part, "exprs": exprs})
    job = {
        "code": code,
        "setup_code": _dataset_code(setup_code, "<setup>", "exec") if setup_code else "",
        "parts": compiled,
    }
    if len(code) <= SERVER_COMPILE_MAX:
        compiled_code, load_error = _candidate(code)
        job["code"] = compiled_code
        if load_error is not None:
            job["load_error"] = load_error
    return job


@functools.lru_cache(maxsize=4)
def _candidate(code: str) -> tuple[Source, dict | None]:
    """The program compiled, or its text and the ``load_error`` the child would send (or its
    text alone: not a known compile error, the child compiles it). Cached: a whole program's
    tests are executions of their own, each of which would compile it again."""
    try:
        return _quiet_compile(code, "<candidate>", "exec"), None
    except COMPILE_ERRORS as exc:
        return code, _syntax_error(exc)
    except Exception:
        return code, None


def _load(code: Source, setup_code: Source, namespace: dict) -> dict | None:
    try:
        program = _code(code, "<candidate>", "exec")
    except COMPILE_ERRORS as exc:
        return _syntax_error(exc)
    try:
        exec(program, namespace)
        if setup_code:
            # It adds names; a name the program defines stays the program's (a LeetCode
            # header's star imports, run again after a program that defines its own
            # ``partial``, would rebind it).
            defined = dict(namespace)
            exec(_code(setup_code, "<setup>", "exec"), namespace)
            for name, value in defined.items():
                if namespace.get(name) is not value:
                    namespace[name] = value
    except BaseException as exc:  # SystemExit included: the program ended before the tests
        return {"t": "load_error", **_describe(exc)}
    return None


_TRACEBACK = BaseException.__dict__["__traceback__"]  # read past a subclass's own property


def _codes_within(code: types.CodeType) -> list[types.CodeType]:
    """``code`` and the code objects nested in it (a test's lambdas and comprehensions)."""
    found = [code]
    for const in code.co_consts:
        if type(const) is types.CodeType:
            found += _codes_within(const)
    return found


def _raised_by(exc: BaseException, code: types.CodeType) -> bool:
    """Whether the innermost frame of ``exc``'s traceback ran ``code`` (the test's own
    statement), not the program's code the test called. Reads C-level attributes only."""
    try:
        tb = _TRACEBACK.__get__(exc)
        if tb is None:
            return False
        while tb.tb_next is not None:
            tb = tb.tb_next
        innermost = tb.tb_frame.f_code
        return any(innermost is nested for nested in _codes_within(code))
    except BaseException:
        return False


def _run_test(index: int, part: dict, namespace: dict, clean_builtins: dict) -> dict:
    code = None
    try:
        if part["kind"] == "exec":
            code = _code(part["src"], "<test>", "exec")
            exec(code, namespace)
            return {"t": "test", "i": index, "ok": True}
        scope = dict(namespace)
        scope["__builtins__"] = clean_builtins  # builtins patched by the program do not apply
        values = [canonicalise(eval(_code(src, "<test>", "eval"), scope)) for src in part["exprs"]]
        return {"t": "test", "i": index, "values": values}
    except BaseException as exc:
        record = {"t": "test", "i": index, **_describe(exc)}
        # The test's own assertion failed, not one the program raised while the test called
        # it: the verdict is the same (failed), but only the former is a wrong answer.
        if code is not None and record["kind"] == "assert" and _raised_by(exc, code):
            record["own"] = True
        return record


def run(code: Source, setup_code: Source, parts: list[dict]) -> None:
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


def _text_stream(fd: int, mode: str) -> io.TextIOWrapper:
    """A standard stream as ``python3`` makes it for a pipe on Linux: UTF-8, escaping what is
    not (the UTF-8 mode's ``surrogateescape``), no newline translation, block-buffered."""
    raw = io.FileIO(fd, mode, closefd=False)
    buffered = io.BufferedReader(raw) if mode == "r" else io.BufferedWriter(raw)
    return io.TextIOWrapper(buffered, "utf-8", "surrogateescape", "\n")


# A whole program's stdin and stdout, made once in the worker before the zygote is forked
# (made in each child they cost page faults: docs/benchmarks.md, stdin/stdout section). They
# name descriptors 0 and 1, which the child points at the test's pipes before the program runs.
_STREAMS: list[io.TextIOWrapper] = []


def prepare_streams() -> None:
    """Made while descriptors 0 and 1 are pipes, as the child's will be: a stream caches
    whether its descriptor is seekable, and the worker's own 0 and 1 are ``/dev/null``."""
    saved = [os.dup(0), os.dup(1)]
    pipes = [os.pipe(), os.pipe()]
    try:
        os.dup2(pipes[0][0], 0)
        os.dup2(pipes[1][1], 1)
        _STREAMS[:] = [_text_stream(0, "r"), _text_stream(1, "w")]
    finally:
        os.dup2(saved[0], 0)
        os.dup2(saved[1], 1)
        for fd in (*saved, *pipes[0], *pipes[1]):
            os.close(fd)


def _exit_status(code: object) -> int:
    """What ``sys.exit(code)`` makes the process's exit status, as the interpreter does it."""
    if code is None:
        return 0
    if type(code) is int:
        return code & 0xFF
    return 1  # the interpreter prints any other object to stderr and exits with 1


def run_program(code: Source, argv: list[str] | None = None, files: dict | None = None) -> None:
    """Run a whole program on its stdin (fd 0: the test's input) and stdout (fd 1); never returns.

    No records: what counts is the output, compared on the trusted side, and how the process
    ended. ``argv`` and ``files`` (written into the scratch first): a Python output
    validator's arguments and the files they name.
    """
    status = 1
    try:
        if files:
            _write_files(files)
        if argv:  # as ``python3 SCRIPT ARGS``, whose directory (here the scratch) comes first
            sys.argv = list(argv)
            sys.path.insert(0, os.getcwd())
        stdin, stdout = _STREAMS
        sys.stdin = sys.__stdin__ = stdin
        sys.stdout = sys.__stdout__ = stdout
        namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
        status = _main(code, namespace)
        for stream in {id(sys.stdout): sys.stdout, id(stdout): stdout}.values():
            if not stream.closed:  # a program may close its stdout, as python3 allows
                stream.flush()  # output the program left in a buffer is its output
    except BaseException:
        status = status or 1  # a flush that failed (a broken pipe): output lost
    _exit(status)


def _main(code: Source, namespace: dict) -> int:
    """The program, then what ``python3`` does before it exits: wait for its threads (contest
    programs run ``main`` in a thread with a larger stack) and run its ``atexit`` handlers; an
    uncaught exception's traceback goes to stderr. Returns the exit status."""
    try:
        exec(_code(code, "<candidate>", "exec"), namespace)
        status = 0
    except SystemExit as exc:
        status = _exit_status(exc.code)
        if status == 1 and exc.code is not None and type(exc.code) is not int:
            sys.stderr.write(f"{exc.code}\n")
    except BaseException:
        kind, value, trace = sys.exc_info()
        if trace is not None:  # from the program's own frame on: the harness's is not its
            value = value.with_traceback(trace.tb_next)
        sys.excepthook(kind, value, value.__traceback__)
        status = 1
    try:
        if "threading" in sys.modules:
            sys.modules["threading"]._shutdown()
        if "atexit" in sys.modules:
            sys.modules["atexit"]._run_exitfuncs()
    except SystemExit as exc:
        status = _exit_status(exc.code)
    except BaseException:
        sys.excepthook(*sys.exc_info())
        status = 1
    return status


def run_command(argv: list[str], files: dict[str, bytes]) -> None:
    """Run a native program (a compiler, a compiled program, an output validator) on the same
    descriptors as :func:`run_program`; never returns. ``files`` are written into the scratch
    directory first. Its environment is empty, as every program's; 127 if it cannot start."""
    try:
        _write_files(files)
        os.execve(argv[0], argv, {})
    except BaseException:
        pass
    _exit(127)


def _write_files(files: dict[str, bytes]) -> None:
    """Into the working directory (the scratch), executable by their owner; a name ending in
    "/" is a directory."""
    for name, data in files.items():
        if name.endswith("/"):
            os.mkdir(name, 0o700)
            continue
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o700)
        try:
            _send(memoryview(data), fd)
        finally:
            os.close(fd)
