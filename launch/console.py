"""The console of ``python -m launch.train``: a person reads it, so it shows the project's lines;
the run's ``train.log`` keeps every line.

Run as a program (not ``--verbose``), ``launch.train`` points its fds 1 and 2, which Ray's lines
forwarded from the actors and the C extensions write to as well, at pipes. A reader thread writes
every line to ``<run dir>/train.log`` and passes on to the terminal only the lines
:class:`Classifier` shows: the project's logging lines (``2026-12-06 08:02:56,209 launch.train:
...``, also when Ray forwards them from an actor as ``(RolloutWorker pid=N) ...``), the progress
lines, ``error:`` and ``warning:`` lines, Python tracebacks and other libraries' lines at ERROR
level or above. Lines written before the run directory is this process's are held in memory and
written to the log when :func:`log_to` names it. With ``--verbose`` (``show_all``) the terminal
gets every line as it comes, and the log still gets them all. Should the filter itself fail,
every line goes to the terminal again.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import select
import sys
import threading
import time
from pathlib import Path

#: The project's packages: their loggers' lines are the console's.
PACKAGES = ("launch", "actor", "learner", "sandbox", "common", "algorithm")
#: How the project's logging lines look (``main()`` of launch/train.py, :func:`worker_logging`).
FORMAT = "%(asctime)s %(name)s: %(message)s"
#: The run's full output, in its run directory.
LOG_FILE = "train.log"
#: A line longer than this (no newline yet) is passed on in pieces, shown or not as its first.
MAX_LINE = 1 << 20
#: Held in memory before the run directory is known; more is dropped (and the log says so).
MAX_HELD = 32 << 20
#: At the end, how long the reader goes on reading what other processes (Ray's, which may hold
#: the pipes' write ends) still write, and how long the end waits for it.
DRAIN_S = 2.0
JOIN_TIMEOUT_S = 5.0
READ_SIZE = 1 << 16

_STAMP = r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[,.]\d+)?"
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_ANSI_BYTES = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]")
#: Ray's prefix on a line it forwards: ``(RolloutWorker pid=31707)``, ``(pid=9, ip=10.0.0.2)``,
#: ``(raylet)``.
_SOURCE = re.compile(
    r"\((?:[^\n]*? )?pid=\d+(?:, ip=[^)\s]*)?\) ?"
    r"|\((?:raylet|gcs_server|autoscaler|monitor|dashboard\w*)(?:, ip=[^)\s]*)?\) ?"
)
_SHOWN = re.compile(
    "|".join(
        (
            rf"{_STAMP} (?:{'|'.join(PACKAGES)})(?:\.[\w.]+)?: ",  # the project's logging
            r"\[[#.]+\] step +\d+/\d+ ",  # the progress line
            r"(?:error|warning|full log): ",
            rf"\[?{_STAMP}\]?\s+(?:ERROR|CRITICAL|FATAL)\b",  # Ray's logging, other libraries'
            r"(?:ERROR|CRITICAL|FATAL)[: ]",  # Python's default logging format
            r"\[?[EF]\d{4} \d\d:\d\d:\d\d",  # glog: E1206 08:03:12.499000, [E1206 ...]
            r"\[[EF] ",  # torch's C++: [E ProcessGroupNCCL.cpp:...]
            rf"\[{_STAMP} [EF] \d+ \d+\]",  # Ray's C++: [2026-12-06 08:05:53,824 E 7445 7445]
            r"[A-Za-z_][\w.]*(?:Error|Exception)(?:\([\w.]+\))?: ",  # an exception, alone
            r"(?:KeyboardInterrupt|SystemExit)\b",
            r"Fatal Python error: ",
            r"\*\*\* SIG[A-Z]+ received",
            r".*(?:A worker died or was killed|running low on memory)",  # the raylet's
        )
    )
)
#: The lines that start a traceback (or a fault handler's stack), or chain one to the next.
_TRACEBACK = re.compile(
    r".*\(most recent call (?:last|first)\):$"
    r"|During handling of the above exception|The above exception was the direct cause"
)


def is_project(logger_name: str) -> bool:
    return logger_name.split(".", 1)[0] in PACKAGES


class Classifier:
    """Whether a line of output is shown on the console, by its text with Ray's prefix and
    ANSI codes left out (the line itself is shown as it is). A traceback is shown from its
    ``Traceback (most recent call last):`` through its exception line; a line that starts with
    white space (or is empty) goes where the line before it from the same source went (a
    multi-line error's rest, a warning's source line). ``extra`` matches more lines to show (a
    tool's own printed lines). Stateful: one per stream."""

    def __init__(self, extra: re.Pattern | None = None) -> None:
        self._extra = extra
        self._last: dict[str, bool] = {}  # source -> whether its last line was shown
        self._traceback: set[str] = set()  # sources inside a traceback

    def shown(self, line: str) -> bool:
        text = _ANSI.sub("", line).rstrip("\r\n")
        source = ""
        if found := _SOURCE.match(text):
            source, text = found.group().strip(), text[found.end() :]
        if "\r" in text:  # a progress bar redrawn in place: judged by what it shows last
            text = next((part for part in reversed(text.split("\r")) if part), "")
        indented = not text.strip() or text[0].isspace()
        if source in self._traceback:
            if not (indented or _TRACEBACK.match(text)):
                self._traceback.discard(source)  # its exception line, shown too
            shown = True
        elif _TRACEBACK.match(text):
            self._traceback.add(source)
            shown = True
        elif indented:
            shown = self._last.get(source, False)
        else:
            shown = bool(_SHOWN.match(text) or (self._extra and self._extra.match(text)))
        self._last[source] = shown
        return shown


class _Stream:
    """One of the process's output streams: the pipe it writes to now, the terminal it wrote to."""

    def __init__(self, fd: int, extra: re.Pattern | None = None) -> None:
        self.fd = fd
        self.terminal = os.dup(fd)
        self.read, self.write = os.pipe()
        self.pending = bytearray()  # a line not ended yet
        self.piece: bool | None = None  # a long line passed on in pieces: whether it is shown
        self.classifier = Classifier(extra)

    def split(self, data: bytes) -> tuple[bytes, bytes]:
        """What of ``data`` the terminal shows, and what the log gets (every whole line). Should
        it fail, ``pending`` is as it was."""
        *lines, rest = (bytes(self.pending) + data).split(b"\n")
        shown, every = [], []
        for line in lines:
            every.append(line + b"\n")
            if self._shown(line):
                shown.append(line + b"\n")
            self.piece = None
        if len(rest) > MAX_LINE:  # no end in sight: pass it on as it is
            self.piece = self._shown(rest)  # and the rest of the line as this piece
            every.append(rest)
            if self.piece:
                shown.append(rest)
            rest = b""
        self.pending = bytearray(rest)
        return b"".join(shown), b"".join(every)

    def _shown(self, line: bytes) -> bool:
        if self.piece is not None:
            return self.piece
        return self.classifier.shown(line.decode("utf-8", errors="replace"))


def _write_all(fd: int, data: bytes) -> None:
    """All of ``data`` to ``fd``; a terminal that is gone drops it (the run goes on)."""
    view = memoryview(data)
    with contextlib.suppress(OSError):
        while view:
            view = view[os.write(fd, view) :]


class ConsoleFilter:
    """Fds 1 and 2 through a reader thread that shows the project's lines and logs every line
    (module docstring). ``start()`` redirects, ``log_to()`` names the log, ``close()`` drains the
    pipes, puts fds 1 and 2 back and waits for the thread (never forever)."""

    def __init__(self, show_all: bool = False, extra: re.Pattern | None = None) -> None:
        self._show_all = show_all
        self._extra = extra
        self._streams: dict[int, _Stream] = {}
        self._lock = threading.Lock()  # the log and what is held for it
        self._log = None
        self._held = bytearray()
        self._dropped = 0
        self._broken = False  # from then on every line goes to the terminal
        self._log_failed = False  # and those held for the log too
        self._closing = threading.Event()
        self._restored = False
        self._thread = threading.Thread(target=self._main, name="console-filter", daemon=True)
        self._handlers: list[tuple[logging.Handler, logging.Formatter | None]] = []

    def start(self) -> ConsoleFilter:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        made: list[_Stream] = []
        try:
            for fd in (1, 2):
                made.append(_Stream(fd, self._extra))
        except OSError:  # no fd 1 or 2, no descriptor left: the console stays as it was
            for stream in made:
                for end in (stream.terminal, stream.read, stream.write):
                    os.close(end)
            self._closing.set()  # and close() has nothing to do
            return self
        for stream in made:
            self._streams[stream.read] = stream
            os.dup2(stream.write, stream.fd)  # fd 1 (or 2) now holds the pipe's write end
            os.close(stream.write)
        self._thread.start()
        if not self._show_all:
            self._quiet_third_party_logging()
        return self

    def log_to(self, path: Path, append: bool = False) -> None:
        """Every line from now on, and every line held so far, into ``path`` (appended to with
        ``append``, else started again)."""
        try:
            file = path.open("ab" if append else "wb")
        except OSError as exc:  # every line to the terminal then, those held so far first
            self._log_failed = self._broken = True
            print(f"warning: cannot write {path} ({exc.strerror}): every line shown", flush=True)
            return
        with self._lock:
            if self._log is not None:
                self._log.close()
            file.write(self._held)
            if self._dropped:
                file.write(b"[%d bytes of output before this run's directory left out]\n" % (
                    self._dropped))  # fmt: skip
            file.flush()
            self._log, self._held, self._dropped = file, bytearray(), 0
        if not self._show_all:
            print(f"full log: {path}", flush=True)

    def close(self) -> None:
        if self._closing.is_set():
            return
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        self._restore()
        self._closing.set()
        self._thread.join(JOIN_TIMEOUT_S)
        for handler, formatter in self._handlers:
            handler.removeFilter(_third_party_filter)
            handler.setFormatter(formatter)
        if self._thread.is_alive():  # others still write to the pipes: it ends with the process
            return
        for stream in self._streams.values():
            os.close(stream.read)
            os.close(stream.terminal)
        with self._lock:
            if self._log is not None:
                self._log.close()

    # ---- the reader thread --------------------------------------------------------------------

    def _main(self) -> None:
        try:
            self._pump()
        except BaseException:  # the filter is broken, not the run: the terminal gets it all
            self._restore()
            with contextlib.suppress(BaseException):
                self._break()
                self._pass_rest()

    def _pump(self) -> None:
        poller = select.poll()
        for fd in self._streams:
            poller.register(fd, select.POLLIN)
        reading, deadline = set(self._streams), None
        while reading:
            if deadline is None and self._closing.is_set():
                deadline = time.monotonic() + DRAIN_S
            events = poller.poll(100 if deadline else 500)
            if deadline is not None and (not events or time.monotonic() > deadline):
                break  # drained: nothing more came, or others go on writing
            for fd, _ in events:
                data = os.read(fd, READ_SIZE)
                if data:
                    self._on_data(self._streams[fd], data)
                else:  # every write end closed
                    poller.unregister(fd)
                    reading.discard(fd)
        for stream in self._streams.values():  # a last line without its newline
            if stream.pending:
                self._on_data(stream, b"\n")

    def _pass_rest(self) -> None:
        """What the pipes hold and still get, as it is, until no one writes to them or the end."""
        reading = {stream.read: stream for stream in self._streams.values()}
        while reading:
            ready = select.select(list(reading), [], [], 0.1)[0]
            if not ready and self._closing.is_set():
                return
            for fd in ready:
                data = os.read(fd, READ_SIZE)
                if data:
                    self._pass(reading[fd], data)
                else:
                    del reading[fd]

    def _on_data(self, stream: _Stream, data: bytes) -> None:
        if self._broken or self._show_all:
            self._break()  # the lines begun before, if it just broke
            self._pass(stream, data)
            return
        try:
            shown, every = stream.split(data)
        except BaseException:  # whatever the classifier raises, the data in hand is shown
            self._break()
            self._pass(stream, data)
            return
        _write_all(stream.terminal, shown)
        try:
            self._write_log(every)
        except Exception as exc:  # a full disk: nothing may be lost, so all is shown from now
            note = f"warning: train.log failed ({exc}): every line shown from here on\n"
            self._pass(stream, note.encode() + every)
            self._break()

    def _break(self) -> None:
        """Every line to the terminal as it is from now on, starting with those held for a log
        that could not be written and the lines begun."""
        self._broken = True
        with self._lock:
            held = b""
            if self._log_failed:
                held, self._held = bytes(self._held), bytearray()
        if held:
            _write_all(next(iter(self._streams.values())).terminal, held)
        for stream in self._streams.values():
            if stream.pending:
                begun = bytes(stream.pending)
                stream.pending.clear()
                self._pass(stream, begun)

    def _pass(self, stream: _Stream, data: bytes) -> None:
        """``data`` as it is to the terminal (and to the log, where it still can be)."""
        _write_all(stream.terminal, data)
        with contextlib.suppress(Exception):
            self._write_log(data)

    def _write_log(self, data: bytes) -> None:
        data = _ANSI_BYTES.sub(b"", data)
        with self._lock:
            if self._log is not None:
                self._log.write(data)
                self._log.flush()
            elif self._broken:  # no log to hold them for (it failed), or may never be
                return
            elif len(self._held) + len(data) <= MAX_HELD:
                self._held += data
            else:
                self._dropped += len(data)

    def _restore(self) -> None:
        """Fds 1 and 2 back to where they pointed before :meth:`start`."""
        with self._lock:
            if self._restored:
                return
            self._restored = True
            for stream in self._streams.values():
                os.dup2(stream.terminal, stream.fd)

    def _quiet_third_party_logging(self) -> None:
        """Other libraries' loggers in this process: WARNING and above only, with their level in
        the line (an ERROR one is shown, the rest only logged); the project's lines unchanged."""
        for handler in logging.getLogger().handlers:
            self._handlers.append((handler, handler.formatter))
            handler.addFilter(_third_party_filter)
            handler.setFormatter(_LevelledFormatter(handler.formatter))


def _third_party_filter(record: logging.LogRecord) -> bool:
    return is_project(record.name) or record.levelno >= logging.WARNING


class _LevelledFormatter(logging.Formatter):
    """The project's records as ``base`` formats them; another library's with their level."""

    def __init__(self, base: logging.Formatter | None) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")
        self._base = base or logging.Formatter()

    def format(self, record: logging.LogRecord) -> str:
        if is_project(record.name):
            return self._base.format(record)
        return super().format(record)


def worker_logging() -> None:
    """For Ray's ``worker_process_setup_hook`` of the run's actors: the project's loggers write
    their warnings and errors as the driver's do (``FORMAT``), so the console knows them for the
    run's own when Ray forwards them (without it they reach stderr bare, like any other
    library's line). Their INFO lines stay unwritten: the driver says what a start-up did."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(FORMAT))
    for package in PACKAGES:
        package_logger = logging.getLogger(package)
        package_logger.addHandler(handler)
        package_logger.setLevel(logging.WARNING)
        package_logger.propagate = False


_active: ConsoleFilter | None = None


def start(show_all: bool = False, extra: re.Pattern | None = None) -> ConsoleFilter:
    """Filter this process's console until it exits (after Ray's own exit handler, registered
    later, so Ray's last lines are filtered too); ``show_all`` only logs every line; ``extra``
    shows the lines it matches too (a tool's own printed lines)."""
    global _active
    _active = ConsoleFilter(show_all, extra).start()
    atexit.register(_active.close)
    return _active


def log_to(path: Path, append: bool = False) -> None:
    """The run's log, once its directory is this process's; nothing without :func:`start`."""
    if _active is not None:
        _active.log_to(path, append)
