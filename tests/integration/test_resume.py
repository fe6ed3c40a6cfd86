"""A run stopped after step k and resumed sees the prompts an uninterrupted run would have seen."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.helpers import read_jsonl, short_config

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def uninterrupted(straight_run) -> Path:
    """The session's straight run (conftest.py; ``STRAIGHT_STEPS`` >= 6 steps, its first six
    those of a six-step run): what a stopped or restarted run must reproduce."""
    return straight_run.run_dir


def test_a_dead_learner_ends_the_run_and_its_resume_sees_the_same_prompts(
    tmp_path, tiny_model_path, uninterrupted
):
    """A dead learner ends the run with one message naming the last checkpoint and the command
    that resumes it; that command (``python -m launch.train --resume``, here with
    ``--run.steps`` one more than the run had) continues from the checkpoint onto the prompts
    an uninterrupted run sees. Also when a crash cut the logs' last lines: the resume leaves
    them out and appends whole lines after them."""
    from launch.train import RunAborted, main, train
    from tests.integration.helpers import before_steps, kill_for_good

    config = short_config(
        tmp_path,
        "lost",
        tiny_model_path,
        5,
        "--run.checkpoint_every",
        "2",
        "--learner.max_restarts",
        "0",
    )
    run_dir = config.run_dir

    # Dead before step 4 needs it, as after a crash (its state lives only in its process: no
    # restart can help).
    kill_learner = {4: lambda driver: kill_for_good(driver.fleet.learner.handle)}
    with before_steps(kill_learner), pytest.raises(RunAborted) as aborted:
        train(config)
    message = str(aborted.value)
    assert f"learner-{config.run.name} died" in message
    assert "the last checkpoint is at step 2" in message
    assert f"python -m launch.train --resume {run_dir}" in message
    assert [m["step"] for m in read_jsonl(run_dir / "metrics.jsonl")] == [1, 2, 3]
    assert (run_dir / "checkpoint" / "driver_state.json").is_file()
    assert not (run_dir / "checkpoint" / "optimizer").exists()  # one rank: no shards
    for name, cut in (("metrics.jsonl", '{"step": 4, "reward/me'), ("batches.jsonl", '{"st')):
        with (run_dir / name).open("a") as handle:  # as a crash mid-append leaves them
            handle.write(cut)

    # and the command it gives works: the run continues from step 2 to the (new) end
    assert main(["--resume", str(run_dir), "--run.steps", "6"]) == 0
    checkpoints = run_dir / "checkpoints"
    assert [p.name for p in checkpoints.iterdir()] == ["step-0000006"]  # the newest only
    assert (run_dir / "checkpoint").resolve() == (checkpoints / "step-0000006").resolve()

    expected = read_jsonl(uninterrupted / "batches.jsonl")[:6]
    resumed = read_jsonl(run_dir / "batches.jsonl")
    assert [b["step"] for b in resumed] == [1, 2, 3, 4, 5, 6]
    assert resumed[2:] == expected[2:]  # steps 3-6 ran after the resume
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2, 3, 4, 5, 6]
    assert [m["weight_version"] for m in metrics] == [1, 2, 3, 4, 5, 6]
    # The learner resumed from its checkpoint, not from the base model: at step 3, the first
    # after the resume, its policy already differs from the reference (KL > 0, as in the
    # uninterrupted run; from the base model it would be 0), and the engines it pushed to
    # agree with it.
    straight = read_jsonl(uninterrupted / "metrics.jsonl")
    assert metrics[2]["train/kl"] > 0
    for step in (2, 3):
        assert metrics[step]["train/kl"] == pytest.approx(straight[step]["train/kl"], rel=0.25)
    assert max(m["train/logprob_diff_mean"] for m in metrics) < 0.05


def test_a_killed_learner_rank_is_restarted_from_the_checkpoint(
    tmp_path, tiny_model_path, uninterrupted
):
    from launch.train import train
    from tests.integration.helpers import before_steps, kill_for_good

    # Through the collective transport: the new ranks must rejoin the engines' group. Two
    # learner ranks: half a CPU each, so they fit beside the rollout actor on 2 cores.
    ranks = ["--learner.num_ranks", "2", "--learner.num_cpus", "0.5"]
    config = short_config(
        tmp_path, "restarted", tiny_model_path, 6,
        "--run.checkpoint_every", "2",
        "--weights.transport", "collective",
        *ranks,
    )  # fmt: skip
    killed = []

    def kill_rank_1(driver) -> None:  # once: step 4 runs again after the restart
        if not killed:
            killed.append(driver.fleet.learner.handles[1])
            kill_for_good(killed[0])

    with before_steps({4: kill_rank_1}):
        train(config)
    metrics = read_jsonl(config.run_dir / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2, 3, 4, 5, 6]
    # Steps 3-6 ran after the restart from the checkpoint at step 2 (step 3 again).
    assert [m["faults/learner_restarts"] for m in metrics] == [0, 0, 1, 1, 1, 1]
    # The ranks restarted from a distributed checkpoint (one optimiser shard each) and the
    # steps redone saw the prompts a straight run sees.
    assert (config.run_dir / "checkpoint" / "optimizer").is_dir()
    batches = read_jsonl(config.run_dir / "batches.jsonl")
    assert [b["step"] for b in batches] == [1, 2, 3, 4, 5, 6]
    assert batches == read_jsonl(uninterrupted / "batches.jsonl")[:6]
    # The new ranks resumed the trained policy (KL > 0 at once), and the engines serve it.
    assert metrics[2]["train/kl"] > 0
    assert max(m["train/logprob_diff_mean"] for m in metrics) < 0.05
