"""Crash-safe files: JSONL logs with a cut last line, atomic replacement, the run lock."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pytest

from common.durable import (
    JsonlError,
    LockHeld,
    append_jsonl,
    atomic_write_text,
    exclusive_lock,
    parse_jsonl,
    read_jsonl,
    repair_tail,
)
from launch.loop.metrics import MetricsLog, read_metrics
from tests.conftest import REPO_ROOT

ROWS = [{"step": 1, "reward/mean": 0.5}, {"step": 2, "reward/mean": 0.25}]
WHOLE = "".join(json.dumps(row) + "\n" for row in ROWS)


@pytest.mark.parametrize(
    "tail",
    [
        '{"step": 3, "rew',  # cut mid-record
        '{"step": 3, "text": "\u00e9'.encode()[:-1].decode("latin-1"),  # cut inside UTF-8
        "\0\0\0\0\0\0",  # the file system extended the file, the data never came
    ],
)
def test_a_cut_last_line_is_left_out(tmp_path, tail):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(WHOLE.encode() + tail.encode("latin-1"))
    assert read_jsonl(path) == ROWS
    assert read_metrics(path) == ROWS


def test_a_complete_last_row_without_its_newline_is_kept(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(WHOLE + '{"step": 3}')
    assert read_jsonl(path) == [*ROWS, {"step": 3}]


def test_a_bad_line_before_the_last_is_corruption_named_by_file_and_line(tmp_path):
    path = tmp_path / "batches.jsonl"
    path.write_text(json.dumps(ROWS[0]) + '\n{"step": 2, "pro\n' + json.dumps(ROWS[1]) + "\n")
    with pytest.raises(JsonlError, match=r"batches\.jsonl:2: not a JSON row"):
        read_jsonl(path)
    with pytest.raises(JsonlError, match=r"x:1:"):
        parse_jsonl(b"\xff\xfe\n{}\n", "x")  # not UTF-8 either


def test_appending_after_a_cut_line_starts_a_line_of_its_own(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(WHOLE + '{"step": 3, "rew')
    append_jsonl(path, [{"step": 3}])
    assert path.read_text() == WHOLE + '{"step": 3}\n'
    # and a complete row that lost only its newline is kept, then ended
    path.write_text(WHOLE + '{"step": 3}')
    repair_tail(path)
    assert path.read_text() == WHOLE + '{"step": 3}\n'


def test_the_metrics_log_repairs_the_tail_before_it_appends(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(WHOLE + '{"step": 3, "rew')
    log = MetricsLog(path, total_steps=4, stream=io.StringIO(), first_step=2)
    log.write({"step": 3, "reward/mean": 1.0})
    log.close()
    assert [row["step"] for row in read_metrics(path)] == [1, 2, 3]


def test_repairing_a_long_cut_line_finds_its_start(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(WHOLE + '{"text": "' + "x" * 200_000)  # longer than one backward read
    repair_tail(path)
    assert path.read_text() == WHOLE


def test_an_atomic_write_replaces_the_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "control.json"
    path.write_text("old")
    atomic_write_text(path, "new\n")
    assert path.read_text() == "new\n"
    assert os.listdir(tmp_path) == ["control.json"]


def test_the_lock_refuses_a_second_holder_and_names_the_first(tmp_path):
    lock = tmp_path / "run.lock"
    refused = pytest.raises(LockHeld, match=r"held by pid 1 on host \(first\)")
    with exclusive_lock(lock, "pid 1 on host (first)"), refused, exclusive_lock(lock, "second"):
        pass
    with exclusive_lock(lock, "third"):  # released with the block
        assert lock.read_text() == "third\n"


def test_a_killed_holder_releases_the_lock(tmp_path):
    """The lock dies with its process: no stale lock file to delete after a crash."""
    lock = tmp_path / "run.lock"
    code = (
        "import sys; from common.durable import exclusive_lock\n"
        f"with exclusive_lock({str(lock)!r}, 'child'):\n"
        "    print('locked', flush=True); sys.stdin.read()\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline() == "locked\n"
        with pytest.raises(LockHeld, match="child"), exclusive_lock(lock, "parent"):
            pass
    finally:
        child.kill()
        child.wait()
    with exclusive_lock(lock, "parent"):
        pass
