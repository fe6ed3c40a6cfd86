"""A run stopped after step k and resumed sees the prompts an uninterrupted run would have seen."""

from __future__ import annotations

import pytest

from tests.integration.helpers import read_jsonl, short_config

pytestmark = pytest.mark.integration


def test_resumed_run_sees_the_same_prompts(tmp_path, tiny_model_path):
    from launch.train import train

    full = short_config(tmp_path, "full", tiny_model_path, 6)
    train(full)

    interrupted = short_config(tmp_path, "resumed", tiny_model_path, 3)
    run_dir = train(interrupted)
    assert (run_dir / "checkpoint" / "driver_state.json").is_file()
    continued = short_config(tmp_path, "resumed", tiny_model_path, 6)
    train(continued, resume=True)

    expected = read_jsonl(full.run_dir / "batches.jsonl")
    resumed = read_jsonl(run_dir / "batches.jsonl")
    assert [b["step"] for b in resumed] == [1, 2, 3, 4, 5, 6]
    assert resumed[3:] == expected[3:]
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2, 3, 4, 5, 6]
    assert [m["weight_version"] for m in metrics] == [1, 2, 3, 4, 5, 6]
    # The learner resumed from its checkpoint, not from the base model: at step 4 its policy
    # already differs from the reference (KL > 0, as in the uninterrupted run), and the engines
    # it pushed to agree with it.
    uninterrupted = read_jsonl(full.run_dir / "metrics.jsonl")
    assert metrics[3]["train/kl"] > 0
    assert metrics[3]["train/kl"] == pytest.approx(uninterrupted[3]["train/kl"], rel=0.25)
    assert max(m["train/logprob_diff_mean"] for m in metrics) < 0.05
