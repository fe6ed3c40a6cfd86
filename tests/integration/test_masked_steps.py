"""A run with nothing to train on stops after ``run.max_masked_steps`` steps, through
``python -m launch.train`` as a user starts it: one line, exit status 1, a checkpoint kept.

The sandbox pool offers no way to fail on demand, so a reward term masks every completion
(``None``, what an ``infra_error`` gives): to the driver's accounting the two are the same
thing, a step whose every sample has no reward.
"""

from __future__ import annotations

import pytest

from launch.loop.checkpoint import load_driver_state
from tests.integration.helpers import REPO, read_jsonl, run_module

pytestmark = pytest.mark.integration


def _demo_args(run_dir, model_path: str, steps: int, *extra: str) -> list[str]:
    """``launch.train``'s arguments for a small demo run in ``run_dir``."""
    return [
        "--config", str(REPO / "configs" / "demo.toml"),
        "--run.output_dir", str(run_dir.parent),
        "--run.name", run_dir.name,
        "--run.steps", str(steps),
        "--run.plot", "false",
        "--model.path", model_path,
        "--rollout.batch_size", "16",
        "--rollout.num_cpus", "0.5",
        "--rollout.kv_cache_gib", "0.1",
        *extra,
    ]  # fmt: skip


def test_a_run_without_rewards_stops_with_one_line_and_a_checkpoint(tmp_path, tiny_model_path):
    run_dir = tmp_path / "runs" / "masked"
    log = tmp_path / "masked.log"
    args = _demo_args(
        run_dir, tiny_model_path, 5, "--run.max_masked_steps", "2",
        "--reward.terms.broken.function", "tests.integration.helpers:masking_reward",
    )  # fmt: skip
    run_module("launch.train", args, tmp_path, log, status=1)

    output = log.read_text()
    assert "Traceback" not in output
    [line] = [line for line in output.splitlines() if line.startswith("error: ")]
    assert line.startswith(
        "error: steps 1-2 had no sample to train on, run.max_masked_steps (2) in a row: "
        "no completion got a reward: 0% of the sandbox's executions were infra errors, and the "
        "reward terms (reward.terms) returned None for the rest. Stopped with a checkpoint at "
        "step 2"
    )
    assert line.endswith(f"continue with python -m launch.train --resume {run_dir}")

    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2]  # step 3 never started
    for m in metrics:
        assert m["reward/mean"] is None and m["reward/broken/mean"] is None
        assert m["reward/scored_completions"] == 0 and m["weight_version"] == 0
        assert m["sandbox/verdict/infra_error"] == 0  # the sandbox judged them all
    state = load_driver_state(run_dir)  # what --resume would continue from
    assert state.step == 2 and state.weight_version == 0


def test_a_run_whose_groups_all_score_the_same_says_so_once(tmp_path, tiny_model_path):
    """Every reward weighted 0: every group is flat, every advantage 0, nothing is learned.
    The run goes on (it may be what the user wants), but says so once, with what it means."""
    from launch.loop.flat_steps import FLAT_STEPS

    run_dir = tmp_path / "runs" / "flat"
    log = tmp_path / "flat.log"
    args = _demo_args(
        run_dir, tiny_model_path, FLAT_STEPS + 2, "--reward.terms.execution.weight", "0"
    )
    run_module("launch.train", args, tmp_path, log)

    said = [line for line in log.read_text().splitlines() if "the policy is not learning" in line]
    assert len(said) == 1, said
    assert (
        said[0]
        .split("launch.loop.flat_steps: ", 1)[1]
        .startswith(
            f"steps 1-{FLAT_STEPS}: in every group all completions scored the same (reward 0.000)"
        )
    )
    assert "no completion earned any reward" in said[0]
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert len(metrics) == FLAT_STEPS + 2  # said, not stopped
    assert all(m["train/zero_std_frac"] == 1.0 for m in metrics)
