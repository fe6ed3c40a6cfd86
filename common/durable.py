"""Files that survive a crash: atomic replacement, fsync, and JSONL logs with a cut last line.

A run is resumed from what is on disk after a crash, a kill or a full disk, so every file it
reads back is written one of two ways:

- replaced whole (a pointer, a control file, a rewritten log): written to a fresh temporary
  file in the same directory (``mkstemp``: ``O_EXCL``, so a planted file or symlink is never
  followed and two writers never share one), fsynced, renamed over the old one, and the
  directory fsynced, so a reader sees the old content or the new, never a mix;
- appended line by line (``metrics.jsonl``, ``batches.jsonl``, rollout records,
  ``rounds.jsonl``): each line is one ``write`` and flushed, so a crash can only cut the last
  line. Readers take a cut last line for the crash it is and leave it out; a bad line anywhere
  else is corruption and is reported with its file and line number. Before appending again the
  cut tail is truncated, so the next record starts a line of its own. Appends are flushed, not
  fsynced: what a crash of the machine loses is the last steps, which a resume redoes anyway.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import json
import logging
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


class JsonlError(ValueError):
    """A JSONL file has a malformed line that is not its last: corruption, not a crash."""


#: What a file system that cannot sync a directory, or lock a file, answers (some network and
#: FUSE file systems): their renames are as durable as they make them, and a run goes on.
_UNSUPPORTED = {errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOLCK, errno.ENOSYS}


def fsync_dir(directory: str | Path) -> None:
    """Make the directory's entries (a rename, a new file) durable."""
    _fsync(directory, os.O_RDONLY | os.O_DIRECTORY)


def _fsync(path: str | Path, flags: int) -> None:
    """fsync ``path`` opened with ``flags``; a file system that cannot (some network and FUSE
    file systems refuse) is tolerated: the data then is as durable as it can be there."""
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in _UNSUPPORTED:
            raise
    finally:
        os.close(fd)


_RENAME_EXCHANGE = 2


def exchange(first: str | Path, second: str | Path) -> bool:
    """Swap two existing paths in one step (``renameat2(RENAME_EXCHANGE)``): at no moment is
    either name missing. False where the kernel or file system cannot (the caller then
    renames in two steps)."""
    libc = ctypes.CDLL(None, use_errno=True)
    at_fdcwd = -100
    result = libc.renameat2(
        at_fdcwd, os.fsencode(first), at_fdcwd, os.fsencode(second), _RENAME_EXCHANGE
    )
    if result == 0:
        return True
    err = ctypes.get_errno()
    if err in _UNSUPPORTED:  # EINVAL and ENOSYS among them: no RENAME_EXCHANGE here
        return False
    raise OSError(err, os.strerror(err), str(first))


def fsync_tree(root: str | Path) -> None:
    """fsync every file and directory under ``root`` (deepest first), then ``root`` itself."""
    for directory, _subdirs, files in os.walk(root, topdown=False):
        for name in files:
            path = os.path.join(directory, name)
            if not os.path.islink(path):
                _fsync(path, os.O_RDONLY)  # whoever wrote it: the page cache is per file
        fsync_dir(directory)


def atomic_write_text(path: str | Path, text: str, mode: int = 0o644) -> None:
    """Replace ``path`` by ``text`` atomically and durably (module docstring); the file gets
    ``mode`` (mkstemp's 0600 would hide it from a driver running as another user)."""
    path = Path(path)
    fd, partial = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            os.fchmod(handle.fileno(), mode)
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, path)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def parse_jsonl(data: bytes, source: str | Path) -> tuple[list[Any], bool]:
    """The rows of JSONL ``data`` and whether its last line was cut (then left out).

    A last line that does not parse is what a crash mid-append leaves (cut anywhere, even in
    a UTF-8 sequence, or padded with NUL bytes by the file system); a malformed line before it
    raises :class:`JsonlError` naming ``source`` and the line. A complete last row without its
    newline is kept.
    """
    lines = data.split(b"\n")
    if lines and not lines[-1]:
        lines.pop()
    rows: list[Any] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line.decode("utf-8")))
        except (UnicodeDecodeError, json.JSONDecodeError):
            if number == len(lines):
                return rows, True
            raise JsonlError(
                f"{source}:{number}: not a JSON row (the file is corrupt before its last line)"
            ) from None
    return rows, False


def read_jsonl(path: str | Path) -> list[Any]:
    """Every row of a JSONL file written by appends; a cut last line is left out (with a
    warning), any other malformed line raises :class:`JsonlError` naming it."""
    rows, cut = parse_jsonl(Path(path).read_bytes(), path)
    if cut:
        logger.warning("%s: leaving out its last line, cut by a crash mid-write", path)
    return rows


def repair_tail(path: str | Path) -> None:
    """Before appending to ``path``: drop a cut last line, or end a complete last row that
    lost its newline, so the next record starts a line of its own."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return
    if size == 0:
        return
    with path.open("rb+") as handle:
        handle.seek(size - 1)
        if handle.read(1) == b"\n":
            return
        # Only the tail matters: find the start of the last line without reading the file.
        start = _last_line_start(handle, size)
        handle.seek(start)
        tail = handle.read()
        try:
            json.loads(tail.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            logger.warning("%s: dropping its last line, cut by a crash mid-write", path)
            handle.truncate(start)
        else:
            handle.seek(size)
            handle.write(b"\n")


def _last_line_start(handle, size: int, block: int = 1 << 16) -> int:
    """The offset just after the last newline before ``size`` (0 when there is none)."""
    end = size
    while end > 0:
        begin = max(0, end - block)
        handle.seek(begin)
        found = handle.read(end - begin).rfind(b"\n")
        if found >= 0:
            return begin + found + 1
        end = begin
    return 0


def append_jsonl(path: str | Path, rows: Iterable[Any]) -> None:
    """Append ``rows`` to ``path``, one line each, after repairing a cut tail; flushed."""
    repair_tail(path)
    with Path(path).open("a", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")
            handle.flush()


def rewrite_jsonl(path: str | Path, rows: Iterable[Any]) -> None:
    """Replace a JSONL file by ``rows`` atomically (a crash leaves the old file or the new)."""
    atomic_write_text(path, "".join(json.dumps(row) + "\n" for row in rows))


class LockHeld(RuntimeError):
    """Another process holds the lock (the message names it)."""


@contextlib.contextmanager
def exclusive_lock(path: str | Path, holder: str) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` for the block, or raise :class:`LockHeld` at
    once. The lock goes with the process: a crash or a kill releases it, so no stale lock file
    ever needs deleting by hand. ``holder`` (written into the file) names the holder to whoever
    is refused."""
    path = Path(path)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            held_by = os.pread(fd, 512, 0).decode("utf-8", "replace").strip() or "another process"
            raise LockHeld(f"{path} is held by {held_by}") from None
        except OSError as exc:
            if exc.errno not in _UNSUPPORTED:
                raise
            logger.warning("%s: this file system cannot lock it (%s): not locked", path, exc)
        os.ftruncate(fd, 0)
        os.pwrite(fd, holder.encode() + b"\n", 0)
        yield
    finally:
        os.close(fd)  # releases the lock
