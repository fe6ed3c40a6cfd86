"""The model resolved to a local directory on the driver before any actor starts
(launch/data/model_source.py, launch.train.resolve_model): a cached hub name to its snapshot,
one download into the run's shared directory when the hub is on, one line when it cannot."""

from __future__ import annotations

import huggingface_hub
import pytest
from huggingface_hub import constants

from common.config import Config, ConfigError
from launch.data import model_source
from launch.data.model_source import DOWNLOADED, locate_model


def _config(**sections) -> Config:
    return Config.model_validate(sections)


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """An empty Hugging Face cache; :func:`_cache` lays a model out in it as the hub does."""
    cache = tmp_path / "hub-cache"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    return cache


def _cache(cache, repo_id: str, revision: str = "0123abcd"):
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    return snapshot


def _no_download(*args, **kwargs):
    raise AssertionError("no test may download")


def test_a_cached_hub_name_resolves_to_its_snapshot_directory(hub_cache, monkeypatch, tmp_path):
    snapshot = _cache(hub_cache, "owner/coder")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert locate_model("owner/coder") == str(snapshot)
    assert locate_model("owner/coder", download_dir=tmp_path / "hub") == str(snapshot)


def test_an_uncached_hub_name_offline_is_one_line(hub_cache, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(model_source, "download", _no_download)
    with pytest.raises(ConfigError, match=r"^model.path: owner/coder is neither .*hf download"):
        locate_model("owner/coder", download_dir=tmp_path / "hub")


def test_online_the_driver_downloads_once_into_the_shared_directory(
    hub_cache, monkeypatch, tmp_path
):
    calls = []

    def fake_download(repo_id, local_dir=None, **kwargs):
        if kwargs.get("local_files_only"):
            raise huggingface_hub.errors.LocalEntryNotFoundError("not cached")
        calls.append((repo_id, local_dir))
        local_dir.mkdir(parents=True)
        (local_dir / "config.json").write_text("{}")
        return str(local_dir)

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_download)
    target = tmp_path / "hub" / "owner--coder"
    assert locate_model("owner/coder", download_dir=tmp_path / "hub") == str(target)
    assert calls == [("owner/coder", target)] and (target / DOWNLOADED).is_file()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a later run, offline: the copy serves
    assert locate_model("owner/coder", download_dir=tmp_path / "hub") == str(target)
    assert len(calls) == 1


def test_a_half_downloaded_copy_is_not_used_offline(hub_cache, monkeypatch, tmp_path):
    target = tmp_path / "hub" / "owner--coder"
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")  # the weights never arrived: no completion mark
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError, match="neither a local directory nor in the local"):
        locate_model("owner/coder", download_dir=tmp_path / "hub")


def test_a_failed_download_is_one_line(hub_cache, monkeypatch, tmp_path):
    def refused(repo_id, local_dir=None, **kwargs):
        if kwargs.get("local_files_only"):
            raise huggingface_hub.errors.LocalEntryNotFoundError("not cached")
        raise OSError("401 Client Error\nmore detail")

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(huggingface_hub, "snapshot_download", refused)
    with pytest.raises(ConfigError) as caught:
        locate_model("owner/private", download_dir=tmp_path / "hub")
    assert str(caught.value) == (
        "model.path: cannot download owner/private from the hub: 401 Client Error"
    )


def test_without_a_download_directory_an_uncached_name_passes_through(hub_cache, monkeypatch):
    # the tools that load a model in their own process (launch/evaluate.py) keep this
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(model_source, "download", _no_download)
    assert locate_model("owner/coder") == "owner/coder"


def test_launch_train_downloads_under_the_run_output_dir(monkeypatch, tmp_path):
    from launch import train

    seen = {}
    monkeypatch.setattr(
        train, "locate_model", lambda path, download_dir: seen.setdefault("dir", download_dir)
    )
    config = _config(model={"path": "owner/coder"}, run={"output_dir": str(tmp_path / "runs")})
    train.resolve_model(config)
    assert seen["dir"] == (tmp_path / "runs" / "_models" / "hub").resolve()
