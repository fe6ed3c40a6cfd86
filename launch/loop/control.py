"""Changing a running job from outside: ``python -m launch.scale RUN_DIR --rollout-actors N``
(:func:`request_resize`), and SIGTERM/SIGINT (finish the step, checkpoint, stop:
:func:`install_stop_handler`).

The command writes ``<run>/control.json``; the driver polls it before every step and resizes the
rollout fleet (new actors receive the current weights before they serve). A file rather than an
RPC endpoint: it works the same for a local run, a ``ray job submit`` job (the command runs on
the driver's host), and a human with an editor, and it survives a driver restart.

The file is replaced whole (a private temporary file in the run directory, renamed over it), so
the driver never reads half of it and two commands at once cannot mix their requests: the
last rename wins. The driver reads at most :data:`MAX_BYTES` of it and only a whole number of
actors from 1 to :data:`MAX_ROLLOUT_ACTORS`; anything else is reported once and ignored (the
run goes on as it is), never a crash.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import stat
import sys
import threading
import tomllib
from collections.abc import Callable
from pathlib import Path

from common.durable import atomic_write_text

logger = logging.getLogger(__name__)

CONTROL_FILE = "control.json"
#: A control file is a one-line JSON object; anything larger is not one.
MAX_BYTES = 4096
#: The most rollout actors a request may ask for: far beyond any cluster this runs on, small
#: enough that a typo (an extra digit or two) is refused instead of queueing thousands of actors.
MAX_ROLLOUT_ACTORS = 256


class ControlError(ValueError):
    """A control request that cannot be applied (the message says which field and why)."""


def check_rollout_actors(value: object) -> int:
    """``value`` as a rollout fleet size, or :class:`ControlError` saying why not."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ControlError(f"rollout_actors must be a whole number, got {value!r}")
    if not 1 <= value <= MAX_ROLLOUT_ACTORS:
        raise ControlError(
            f"rollout_actors must be between 1 and {MAX_ROLLOUT_ACTORS}, got {value}"
        )
    return value


def check_fixed_size(wanted: int, fixed_size: int | None) -> None:
    """:class:`ControlError` when a colocated run (``fixed_size``: its engines) is asked for
    another number of engines."""
    if fixed_size is not None and wanted != fixed_size:
        raise ControlError(
            f"the run colocates its {fixed_size} engine(s) with its learner "
            "ranks (rollout.colocate), one per rank, so it cannot resize to "
            f"{wanted}; it keeps {fixed_size}"
        )


def colocated_engines(run_dir: Path) -> int | None:
    """The number of engines of the run in ``run_dir`` when it colocates them with its learner
    ranks (its saved ``config.toml``), else None."""
    try:
        rollout = tomllib.loads((run_dir / "config.toml").read_text()).get("rollout", {})
    except (OSError, tomllib.TOMLDecodeError):
        return None
    return int(rollout.get("num_actors", 1)) if rollout.get("colocate") else None


class ControlFile:
    """Reads ``control.json`` when it changes; returns the requested rollout fleet size."""

    def __init__(self, path: Path, fixed_size: int | None = None) -> None:
        self.path = path
        # rollout.colocate: each engine shares a bundle with a learner rank, so the fleet
        # keeps its size; a request for another is reported and ignored.
        self.fixed_size = fixed_size
        self._seen: int | None = None  # the mtime (ns) of the request last read
        self._unreadable: str | None = None  # the last reason the file could not be looked at

    def poll(self) -> int | None:
        """The fleet size asked for since the last poll; ``None`` when nothing new (or the new
        request is malformed: reported once, on stderr, and ignored)."""
        try:
            info = self.path.lstat()
        except FileNotFoundError:
            return None
        except OSError as exc:  # e.g. the run directory's permissions changed: say so once
            if str(exc) != self._unreadable:
                self._unreadable = str(exc)
                _warn(self.path, str(exc))
            return None
        if info.st_mtime_ns == self._seen:
            return None
        self._seen = info.st_mtime_ns
        try:
            wanted = check_rollout_actors(self._read(info).get("rollout_actors"))
            check_fixed_size(wanted, self.fixed_size)
            return wanted
        except (OSError, ValueError) as exc:  # ControlError, JSON and UTF-8 errors included
            _warn(self.path, str(exc))
            return None

    def _read(self, info: os.stat_result) -> dict:
        """The request, read without following a link and never more than ``MAX_BYTES``."""
        if not stat.S_ISREG(info.st_mode):
            raise ControlError("not a regular file")
        if info.st_size > MAX_BYTES:
            raise ControlError(f"{info.st_size} bytes, more than {MAX_BYTES}")
        fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as handle:
            data = handle.read(MAX_BYTES + 1)
        if len(data) > MAX_BYTES:
            raise ControlError(f"more than {MAX_BYTES} bytes")
        request = json.loads(data.decode("utf-8"))
        if not isinstance(request, dict):
            raise ControlError("not a JSON object")
        return request


def _warn(path: Path, why: str) -> None:
    print(f"warning: ignoring {path}: {why}", file=sys.stderr)


def request_resize(run_dir: Path, rollout_actors: int) -> Path:
    """Atomically ask the run in ``run_dir`` to use ``rollout_actors`` rollout actors."""
    try:
        check_rollout_actors(rollout_actors)
    except ControlError as exc:
        raise ValueError(f"--rollout-actors: {exc}") from None
    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir} is not a run directory")
    if not (run_dir / "config.toml").is_file():  # a typo'd path: no driver would ever read it
        raise FileNotFoundError(
            f"{run_dir} is not a run directory: it has no config.toml (launch.train writes one "
            "when a run starts)"
        )
    try:
        check_fixed_size(rollout_actors, colocated_engines(run_dir))
    except ControlError as exc:
        raise ValueError(f"--rollout-actors: {exc}") from None
    path = run_dir / CONTROL_FILE
    atomic_write_text(path, json.dumps({"rollout_actors": rollout_actors}) + "\n")
    return path


def install_stop_handler(callback: Callable[[int], None]) -> Callable[[], None]:
    """SIGTERM/SIGINT finish the current step, checkpoint, and stop; returns the undo function.

    Signal handlers can only be installed from the main thread; elsewhere (a test running the
    driver in a thread) this is a no-op.
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

    def handler(signum, _frame):
        if signum == signal.SIGINT and previous[signal.SIGINT] is not None:
            logger.warning("interrupt: finishing the current step, then checkpointing")
        callback(signum)

    for sig in previous:
        signal.signal(sig, handler)

    def restore() -> None:
        for sig, old in previous.items():
            signal.signal(sig, old)

    return restore
