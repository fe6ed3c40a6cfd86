"""``python -m launch.train`` as a person runs it: the console holds the run's own lines (its
logging, the progress lines, where the full log is), ``train.log`` in the run directory every
line (Ray's, vLLM's, torch's too), and the last line says what the run did and where its results
are."""

from __future__ import annotations

import re

import pytest

from tests.integration.helpers import REPO, run_module

pytestmark = pytest.mark.integration

PROJECT = re.compile(
    r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (?:launch|actor|learner|sandbox|common|algorithm)"
    r"(?:\.[\w.]+)?: "
)
PROGRESS = re.compile(r"\[[#.]{20}\] step +\d+/3 \| reward \S+ \| pass \S+ \| ")


def test_the_console_shows_the_runs_lines_and_train_log_holds_every_line(tmp_path, tiny_model_path):
    run_dir = tmp_path / "runs" / "demo"
    args = [
        "--config", str(REPO / "configs" / "demo.toml"),
        "--run.steps", "3",
        "--run.output_dir", str(run_dir.parent),
        "--model.path", tiny_model_path,
        "--rollout.batch_size", "32",
        "--rollout.num_cpus", "0.5",
        "--rollout.kv_cache_gib", "0.1",
    ]  # fmt: skip
    console = tmp_path / "console.txt"
    run_module("launch.train", args, tmp_path, console)

    lines = [line for line in console.read_text().splitlines() if line.strip()]
    full_log = f"full log: {run_dir / 'train.log'}"
    others = [
        line
        for line in lines
        if not (PROJECT.match(line) or PROGRESS.match(line) or line == full_log)
    ]
    assert not others, "another library's line on the console"
    assert lines.count(full_log) == 1
    assert len([line for line in lines if PROGRESS.match(line)]) == 3
    assert next(line for line in lines if PROGRESS.match(line)).endswith("| eta    --")

    logged = (run_dir / "train.log").read_text().splitlines()
    assert set(lines) <= set(logged)
    assert len(logged) > len(lines)
    assert any(line.startswith("(RolloutWorker pid=") for line in logged), "Ray's forwarding"

    last = lines[-1]
    assert PROJECT.match(last) and "launch.train: run finished: 3 steps, reward " in last, last
    assert re.search(r"reward (\d\.\d\d|n/a) and pass rate (\d\.\d\d|n/a) over the last", last)
    assert f"curve {run_dir / 'reward_curve.png'}" in last
    assert f"checkpoint {run_dir / 'checkpoint'}" in last
    assert (run_dir / "reward_curve.png").is_file() and (run_dir / "checkpoint").is_dir()
