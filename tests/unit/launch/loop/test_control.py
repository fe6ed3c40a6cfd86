"""``launch.scale``'s control file: written safely, read with size and type checks, bounded."""

from __future__ import annotations

import json
import os

import pytest

from launch.loop.control import CONTROL_FILE, MAX_BYTES, MAX_ROLLOUT_ACTORS, ControlFile
from launch.scale import main


def _a_run(run_dir):
    """A directory as ``launch.train`` leaves it: its resolved config first."""
    (run_dir / "config.toml").write_text("[run]\n")
    return run_dir


def test_a_request_is_read_once(tmp_path, capsys):
    assert main([str(_a_run(tmp_path)), "--rollout-actors", "3"]) == 0
    control = ControlFile(tmp_path / CONTROL_FILE)
    assert control.poll() == 3
    assert control.poll() is None  # nothing new
    assert sorted(os.listdir(tmp_path)) == ["config.toml", CONTROL_FILE]  # no temporary file


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b'{"rollout_actors": 2', "Expecting"),  # half a file, written by an editor
        (b"[2]", "not a JSON object"),
        (b'{"rollout_actors": true}', "whole number"),
        (b'{"rollout_actors": "4"}', "whole number"),
        (b'{"rollout_actors": 0}', "between 1 and"),
        (b'{"rollout_actors": 100000}', "between 1 and"),
        (b'{"rollout_actors": 2}' + b" " * MAX_BYTES, "more than"),
        (b"\xff\xfe", "utf-8"),
    ],
)
def test_a_malformed_request_is_reported_once_and_ignored(tmp_path, capsys, content, said):
    path = tmp_path / CONTROL_FILE
    path.write_bytes(content)
    control = ControlFile(path)
    assert control.poll() is None
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and said in lines[0] and str(path) in lines[0]
    assert control.poll() is None and not capsys.readouterr().err  # once
    path.write_text(json.dumps({"rollout_actors": 2}))  # corrected: taken
    os.utime(path, ns=(1, 1))  # a new mtime even on a coarse clock
    assert control.poll() == 2


def test_a_link_or_a_fifo_is_not_read(tmp_path, capsys):
    secret = tmp_path / "secret"
    secret.write_text(json.dumps({"rollout_actors": 5}))
    path = tmp_path / CONTROL_FILE
    path.symlink_to(secret)
    assert ControlFile(path).poll() is None
    path.unlink()
    os.mkfifo(path)  # opening it would block the driver forever
    assert ControlFile(path).poll() is None
    assert capsys.readouterr().err.count("not a regular file") == 2


def test_the_writer_never_follows_a_planted_link(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    (tmp_path / "control.tmp").symlink_to(victim)  # the old fixed temporary name
    (tmp_path / f"{CONTROL_FILE}.tmp").symlink_to(victim)
    (tmp_path / CONTROL_FILE).symlink_to(victim)  # replaced, not written through
    assert main([str(_a_run(tmp_path)), "--rollout-actors", "2"]) == 0
    assert victim.read_text() == "keep me"
    assert not (tmp_path / CONTROL_FILE).is_symlink()
    assert ControlFile(tmp_path / CONTROL_FILE).poll() == 2


@pytest.mark.parametrize("count", ["0", str(MAX_ROLLOUT_ACTORS + 1)])
def test_the_command_refuses_a_count_out_of_bounds(tmp_path, capsys, count):
    assert main([str(tmp_path), "--rollout-actors", count]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --rollout-actors: rollout_actors")
    assert not (tmp_path / CONTROL_FILE).exists()


@pytest.mark.parametrize("where", ["empty", "missing", "a file"])
def test_the_command_refuses_a_directory_that_holds_no_run(tmp_path, capsys, where):
    target = tmp_path / "runs" / "demo_lnog"  # a typo: no driver would ever read its request
    if where == "empty":
        target.mkdir(parents=True)
    elif where == "a file":
        target.parent.mkdir()
        target.write_text("")
    assert main([str(target), "--rollout-actors", "2"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [lines[0]] and lines[0].startswith(f"error: {target} is not a run directory")
    assert not (target / CONTROL_FILE).exists() and not (tmp_path / CONTROL_FILE).exists()
