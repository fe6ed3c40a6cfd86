"""bench/launch/step.py: the summary of measured steps and its printed lines (no engines)."""

import pytest

from bench.launch.step import format_ours, summarize_ours


def _record(rollout, reward, train, sync, wall, samples=128, tokens=128 * 256):
    step = rollout + reward + train + sync
    return {
        "time/rollout_s": rollout,
        "time/reward_s": reward,
        "time/train_s": train,
        "time/weight_sync_s": sync,
        "time/step_s": step,
        "time/wall_s": wall,
        "train/num_samples": samples,
        "train/num_tokens": tokens,
        "rollout/tokens_per_s": tokens / rollout,
        "rollout/response_len_mean": tokens / samples,
        "reward/mean": 0.0,
    }


def test_summary_skips_warmup_and_computes_idle():
    records = [
        _record(100.0, 9.0, 90.0, 1.0, 200.0),  # warm-up: ignored
        _record(6.0, 1.0, 2.5, 0.5, 10.0),  # step 10
        _record(8.0, 1.0, 2.5, 0.5, 12.0),  # step 12
        _record(7.0, 1.0, 2.5, 0.5, 11.0),  # step 11
    ]
    s = summarize_ours(records, warmup=1)
    assert s["steps_measured"] == 3
    assert s["step_s"] == pytest.approx(11.0) and s["rollout_s"] == pytest.approx(7.0)
    assert s["roles"]["rollout"]["busy_s"] == pytest.approx(7.5)
    assert s["roles"]["learner"]["idle_s"] == pytest.approx(11.0 - 3.0)
    assert s["roles"]["sandbox"]["idle_frac"] == pytest.approx(1 - 1 / 11)
    # throughput of the median step (wall 11 s), not total over total
    assert s["samples_per_s"] == pytest.approx(128 / 11.0)
    assert s["tokens_per_s"] == pytest.approx(128 * 256 / 11.0)
    assert s["sync_share"] == pytest.approx(0.5 / 11.0)


def test_learner_flops_per_second_and_the_printed_utilisation():
    records = [_record(7.0, 1.0, train, 0.5, 11.0) for train in (9.0, 2.0, 4.0, 2.5)]
    for record, tflop in zip(records, (90.0, 1.0, 2.0, 2.0), strict=True):
        record["train/model_tflop"] = tflop
    s = summarize_ours(records, warmup=1)
    assert s["learner_tflops"] == pytest.approx(0.5)  # median of 0.5, 0.5, 0.8
    assert "learner:" not in format_ours(s)  # no peak measured: no utilisation line
    s.update(learner_peak_tflops=2.0, learner_utilisation=0.25)
    assert "learner: 0.500 TFLOP/s of model FLOPs, 25.0% of the 2.000 TFLOP/s" in format_ours(s)
