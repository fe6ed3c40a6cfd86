"""A model directory fetched by a host that lacks it (common/model_files.py). The reader here
reads this machine's files, as the driver's pinned task does on its host; the cluster path is
tests/integration/test_hosts.py."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest

from common import model_files
from common.model_files import COMPLETE, describe, local_path, read_piece


@pytest.fixture
def model(tmp_path) -> Path:
    root = tmp_path / "driver" / "model"
    (root / "sub").mkdir(parents=True)
    (root / "config.json").write_text('{"model_type": "qwen2"}')
    (root / "sub" / "weights.bin").write_bytes(os.urandom(3000))
    blob = tmp_path / "driver" / "blob"  # a hub cache's snapshot links to its blobs
    blob.write_bytes(b"tokenizer")
    (root / "tokenizer.json").symlink_to(blob)
    return root


class Reads:
    """read_piece on the "driver's host" (``root``, whatever the path the model names there),
    counting its calls; failing after ``fail_after`` of them."""

    def __init__(self, root: Path, fail_after: int | None = None) -> None:
        self.root, self.calls, self.fail_after = root, 0, fail_after

    def __call__(self, root: str, relative: str, offset: int, size: int) -> bytes:
        self.calls += 1
        if self.fail_after is not None and self.calls > self.fail_after:
            raise ConnectionError("the driver's node is gone")
        return read_piece(str(self.root), relative, offset, size)


def _elsewhere(model: Path, reads: Reads) -> model_files.ModelFiles:
    """The model as an actor on a host without ``model``'s directory gets it."""
    return model_files.ModelFiles("/elsewhere/model", describe(str(model), reads).files, reads)


def _same_files(a: Path, b: Path) -> bool:
    names = sorted(str(p.relative_to(a)) for p in a.rglob("*") if p.is_file())
    return names == sorted(
        str(p.relative_to(b)) for p in b.rglob("*") if p.is_file() and p.name != COMPLETE
    ) and all((a / n).read_bytes() == (b / n).read_bytes() for n in names)


def test_a_host_with_the_directory_uses_it(model, tmp_path):
    reads = Reads(model)
    assert local_path(describe(str(model), reads), tmp_path / "cache") == str(model)
    assert reads.calls == 0
    assert local_path(str(model)) == str(model)  # a plain path is a path


def test_a_host_without_it_fetches_it_once(model, tmp_path, monkeypatch):
    monkeypatch.setattr(model_files, "PIECE_BYTES", 1024)  # several pieces per file
    reads = Reads(model)
    assert dict(describe(str(model), reads).files) == {
        "config.json": 23,
        "sub/weights.bin": 3000,
        "tokenizer.json": 9,
    }
    files = pickle.loads(pickle.dumps(_elsewhere(model, reads)))  # as an actor receives it
    copy = Path(local_path(files, tmp_path / "cache"))
    assert copy.parent == tmp_path / "cache" and _same_files(model, copy)
    assert files.read.calls == 1 + 3 + 1  # a piece each, weights.bin three
    assert local_path(files, tmp_path / "cache") == str(copy)  # the host's next actor
    assert files.read.calls == 5


def test_a_directory_whose_files_differ_is_not_used(model, tmp_path):
    here = tmp_path / "host" / "model"  # this host has a directory at that path: another model
    here.mkdir(parents=True)
    (here / "config.json").write_text("{}")
    reads = Reads(model)
    files = model_files.ModelFiles(str(here), describe(str(model), reads).files, reads)
    copy = Path(local_path(files, tmp_path / "cache"))
    assert copy != here and _same_files(model, copy)


def test_an_interrupted_fetch_is_never_used(model, tmp_path):
    with pytest.raises(ConnectionError):
        local_path(_elsewhere(model, Reads(model, fail_after=1)), tmp_path / "cache")
    assert not list((tmp_path / "cache").glob(f"*/{COMPLETE}"))
    copy = Path(local_path(_elsewhere(model, Reads(model)), tmp_path / "cache"))
    assert (copy / COMPLETE).is_file() and _same_files(model, copy)


def test_a_read_stays_below_the_model_directory(model):
    weights = (model / "sub/weights.bin").read_bytes()
    assert read_piece(str(model), "sub/weights.bin", 10, 5) == weights[10:15]
    for outside in ("../blob", "/etc/passwd", "sub/../../blob"):
        with pytest.raises(ValueError, match="is not a path below"):
            read_piece(str(model), outside, 0, 10)
