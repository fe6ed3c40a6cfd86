"""What the commands accept on their command line, checked before any work starts: ``--workers 0``
ends in argparse's own error naming the flag before a model, a sandbox pool or torch is loaded,
and an output path that cannot take the results is refused before they are computed, not after.
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path


class OutputPathError(ValueError):
    """An output path the command could not write its results to (the message names the flag)."""


def _parse(text: str, kind: type, what: str) -> int | float:
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None


def positive_int(text: str) -> int:
    """A whole number of at least 1 (workers, epochs, prompts, samples)."""
    value = _parse(text, int, "a whole number")
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """A whole number of at least 0 (the flags where 0 means "all" or "none")."""
    value = _parse(text, int, "a whole number")
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def positive_float(text: str) -> float:
    """A finite number above 0 (a learning rate, a time limit, a memory size)."""
    value = _parse(text, float, "a number")
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number above 0, got {text!r}")
    return value


def _exists(path: Path, flag: str) -> bool:
    """``path.exists()``, where a directory on the way this user may not enter (EACCES, which
    ``exists`` raises rather than answers) refuses the path in one line."""
    try:
        return path.exists()
    except OSError as exc:
        raise OutputPathError(f"{flag}: cannot reach {path}: {exc.strerror}") from None


def _check_parents(out: Path, flag: str) -> None:
    """The nearest directory of ``out`` that exists is one this process can create it in (the
    missing ones between are made when the results are written)."""
    for parent in out.absolute().parents:
        if not _exists(parent, flag):
            continue
        if not parent.is_dir():
            raise OutputPathError(f"{flag}: cannot create {out}: {parent} is not a directory")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise OutputPathError(f"{flag}: cannot create {out}: {parent} is not writable")
        return


def check_output_file(path: str | Path, flag: str) -> Path:
    """``path`` as the file a command writes its results to at the end; :class:`OutputPathError`
    when it is a directory, is not writable, or cannot be created."""
    out = Path(path)
    exists = _exists(out, flag)
    if out.is_dir():
        raise OutputPathError(f"{flag}: {out} is a directory; give the path of a file")
    if exists:
        if not os.access(out, os.W_OK):
            raise OutputPathError(f"{flag}: {out} is not writable")
        return out
    _check_parents(out, flag)
    return out


def check_output_dir(
    path: str | Path, flag: str, overwrite: bool, results: tuple[str, ...] = ()
) -> Path:
    """``path`` as the directory a command writes its results into at the end;
    :class:`OutputPathError` when it is a file, is not writable, cannot be created, or already
    holds ``results`` (any entry when none are named) and ``overwrite`` is off: results of an
    earlier run are never replaced silently, while other files beside them do not count."""
    out = Path(path)
    exists = _exists(out, flag)
    if exists and not out.is_dir():
        raise OutputPathError(f"{flag}: {out} is a file; give a directory")
    if not exists:
        _check_parents(out, flag)
        return out
    if not os.access(out, os.W_OK | os.X_OK):
        raise OutputPathError(f"{flag}: {out} is not writable")
    if overwrite:
        return out
    held = sorted(e.name for e in out.iterdir() if not results or e.name in results)
    if held:
        raise OutputPathError(
            f"{flag}: {out} already holds {held[0]}{' and more' if len(held) > 1 else ''}: "
            f"give another {flag}, or --overwrite to write over it"
        )
    return out
