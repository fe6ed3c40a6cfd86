"""The progress line's ETA and pass rate, and the run's last line (launch/loop/metrics.py,
launch.train.finished), on a clock the test moves: no sleeping, no timed assertion."""

from __future__ import annotations

import io
import json
from pathlib import Path

from launch.loop.metrics import MetricsLog, duration, summary
from launch.train import finished


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _etas(tmp_path: Path, gaps: list[float], total: int = 100, first_step: int = 0) -> list[str]:
    """The ETA of each progress line when step ``first_step + i + 1`` is written ``gaps[i]``
    seconds after the one before (the first: after the log was made)."""
    clock, stream = Clock(), io.StringIO()
    log = MetricsLog(tmp_path / "m.jsonl", total, stream, first_step=first_step, clock=clock)
    for step, gap in enumerate(gaps, first_step + 1):
        clock.now += gap
        log.write({"step": step, "reward/mean": 0.5})
    log.close()
    return [line.rsplit("| eta ", 1)[1] for line in stream.getvalue().splitlines()]


def test_the_eta_leaves_out_the_first_steps_warm_up(tmp_path):
    # 4,000 s of engine start and warm-up before step 1, then 2 s a step: 2 s x the steps left
    assert _etas(tmp_path, [4000, 2, 2, 2]) == ["   --", "3m16s", "3m14s", "3m12s"]


def test_the_eta_is_the_median_step_so_one_slow_step_barely_moves_it(tmp_path):
    # step 4 waits 60 s for a checkpoint: the median of (2, 2, 60) is still 2 s
    assert _etas(tmp_path, [30, 2, 2, 60], total=10) == ["   --", "  16s", "  14s", "  12s"]


def test_a_resumed_run_counts_from_its_own_steps(tmp_path):
    # resumed after step 50 of 100: its first step is a warm-up too
    assert _etas(tmp_path, [500, 3, 3], first_step=50) == ["   --", "2m24s", "2m21s"]


def test_durations_read_at_a_glance():
    assert [duration(s) for s in (0, 42.4, 725, 4281, 11220)] == [
        "0s", "42s", "12m05s", "1h11m", "3h07m"
    ]  # fmt: skip


def test_the_progress_line_has_the_pass_rate_after_the_reward(tmp_path):
    stream = io.StringIO()
    log = MetricsLog(tmp_path / "m.jsonl", total_steps=2, stream=stream, clock=Clock())
    log.write({"step": 1, "reward/mean": 0.5, "reward/pass_rate": 0.421})
    log.write({"step": 2, "reward/mean": 0.5})  # a record without one
    log.close()
    first, second = stream.getvalue().splitlines()
    assert "| reward 0.500 | pass 0.42 | loss" in first
    assert "| reward 0.500 | pass n/a | loss" in second


def _run_dir(tmp_path: Path, rewards: list[float | None], passes: list[float | None]) -> Path:
    run_dir = tmp_path / "runs" / "demo"
    run_dir.mkdir(parents=True)
    rows = [
        {"step": step, "reward/mean": reward, "reward/pass_rate": passed}
        for step, (reward, passed) in enumerate(zip(rewards, passes, strict=True), 1)
    ]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return run_dir


def test_the_last_line_gives_the_last_ten_steps_reward_and_pass_rate_and_the_results(tmp_path):
    # 12 steps: the first two (reward 0) are left out; a step without a pass rate too
    rewards = [0.0, 0.0, *[0.9] * 5, *[1.0] * 5]
    passes = [0.0, 0.0, None, *[0.8] * 4, *[0.9] * 5]
    run_dir = _run_dir(tmp_path, rewards, passes)
    (run_dir / "checkpoints" / "step-0000012").mkdir(parents=True)
    (run_dir / "checkpoint").symlink_to("checkpoints/step-0000012")
    assert finished(run_dir, plotted=True) == (
        "12 steps, reward 0.95 and pass rate 0.86 over the last 10 steps; "
        f"curve {run_dir}/reward_curve.png, checkpoint {run_dir}/checkpoint"
    )
    assert finished(run_dir, plotted=False).endswith(f"steps; checkpoint {run_dir}/checkpoint")


def test_a_short_run_without_measures_says_so(tmp_path):
    run_dir = _run_dir(tmp_path, [None], [None])
    last = "1 step, reward n/a and pass rate n/a over the last step"
    assert finished(run_dir, plotted=False) == last
    assert summary(tmp_path / "nowhere.jsonl") == "no step written"
