"""A model directory on the driver's host, and how an actor on a host without it gets it.

The driver resolves ``model.path`` to a local directory (``launch/data/model_source.py``),
which on a cluster without a shared file system exists on the driver's host only. So actors get
a :class:`ModelFiles`: the directory, its files and their sizes, and a reader that runs on the
driver's host. An actor whose host has the directory with the same files uses it
(a shared file system, or the model put there beforehand); else it fetches the files once per
host into ``~/.cache/grpo-code/models/<digest>``, in 64 MiB pieces through Ray's object store
(``launch/fleet/actors.py`` pins the reads to the driver's node), under a lock, so the actors
of one host fetch it once between them, and an interrupted fetch is never used.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

PIECE_BYTES = 64 * 1024 * 1024
#: ``read(root, relative path, offset, size)``: bytes of a file under ``root`` on the driver's
#: host.
Reader = Callable[[str, str, int, int], bytes]
COMPLETE = ".complete"  # written last into a fetched copy: a directory without it is partial


@dataclass(frozen=True)
class ModelFiles:
    """A model directory (``path``, on the driver's host), its files as (relative path, bytes),
    and the reader a host without them fetches them with."""

    path: str
    files: tuple[tuple[str, int], ...]
    read: Reader

    @property
    def digest(self) -> str:
        """Names the copy: the same files of the same directory share one per host."""
        listing = repr((self.path, self.files)).encode()
        return hashlib.sha256(listing).hexdigest()[:20]

    @property
    def size(self) -> int:
        return sum(size for _, size in self.files)


def describe(path: str, read: Reader) -> ModelFiles:
    """``path``'s files (symbolic links followed: a hub cache's snapshot is links to blobs)."""
    root = Path(path)
    files = sorted(
        (str(p.relative_to(root)), p.stat().st_size) for p in root.rglob("*") if p.is_file()
    )
    return ModelFiles(str(root), tuple(files), read)


def read_piece(root: str, relative: str, offset: int, size: int) -> bytes:
    """``size`` bytes at ``offset`` of ``root/relative``, a path below ``root`` (a hub cache's
    links out of it are followed, as :func:`describe` follows them)."""
    if Path(relative).is_absolute() or ".." in Path(relative).parts:
        raise ValueError(f"model: {relative!r} is not a path below {root}")
    with open(Path(root) / relative, "rb") as file:
        file.seek(offset)
        return file.read(size)


def local_path(model: str | ModelFiles, cache: Path | None = None) -> str:
    """A directory on this host holding the model: ``model`` itself when it is a path, the
    driver's directory when this host has it with the same files, else this host's fetched
    copy (fetched now when there is none)."""
    if isinstance(model, str):
        return model
    if not _missing(Path(model.path), model.files):
        return model.path
    cache = cache or Path.home() / ".cache" / "grpo-code" / "models"
    target = cache / model.digest
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f"{model.digest}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the other actors of this host wait for one fetch
        if not (target / COMPLETE).is_file():
            _fetch(model, target)
    return str(target)


def _missing(root: Path, files: tuple[tuple[str, int], ...]) -> list[tuple[str, int]]:
    """The ``files`` that ``root`` lacks, or holds at another size."""
    return [(name, size) for name, size in files if not _sized(root / name, size)]


def _sized(path: Path, size: int) -> bool:
    try:
        return path.stat().st_size == size
    except OSError:
        return False


def _fetch(model: ModelFiles, target: Path) -> None:
    """Every file of ``model`` into ``target`` through a partial directory renamed at the end."""
    log.info(
        "model: fetching %s (%d files, %.0f MiB) from the driver's host into %s",
        model.path, len(model.files), model.size / 2**20, target,
    )  # fmt: skip
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.rmtree(target, ignore_errors=True)
    for name, size in model.files:
        _copy(model, name, size, partial / name)
    (partial / COMPLETE).touch()
    partial.rename(target)


def fill(model: ModelFiles, target: Path) -> int:
    """The files of ``model`` that ``target`` lacks (or holds at another size) fetched into it,
    fsynced; how many. A driver gathers so what a learner on another host wrote of a
    checkpoint into the checkpoint's own directory on its disk."""
    missing = _missing(target, model.files)
    for name, size in missing:
        _copy(model, name, size, target / name)
    return len(missing)


def _copy(model: ModelFiles, name: str, size: int, path: Path) -> None:
    """File ``name`` of ``model`` (``size`` bytes) to ``path``, piece by piece, fsynced."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as file:
        for offset in range(0, size, PIECE_BYTES):
            wanted = min(PIECE_BYTES, size - offset)
            piece = model.read(model.path, name, offset, wanted)
            if len(piece) != wanted:
                raise OSError(f"model: {model.path}/{name} changed on the host it is read from")
            file.write(piece)
        file.flush()
        os.fsync(file.fileno())
