"""The whole loop on a local Ray cluster: vLLM rollouts, sandbox rewards, GRPO learner, push."""

from __future__ import annotations

import glob
import os
import statistics
import tempfile

import pytest

from common.config import load_config
from launch.loop.metrics import read_metrics
from sandbox.trusted.host import alive

pytestmark = pytest.mark.integration

REQUIRED_METRICS = {
    "step",
    "weight_version",
    "reward/mean",
    "reward/std",
    "reward/pass_rate",
    "train/loss",
    "train/kl",
    "train/logprob_diff_mean",
    "train/zero_std_frac",
    "rollout/response_len_mean",
    "rollout/tokens_per_s",
    "time/step_s",
    "time/rollout_s",
    "time/reward_s",
    "time/train_s",
    "time/weight_sync_s",
    "sandbox/exec_p99_ms",
    "sandbox/verdict/passed",
    "sandbox/verdict/syntax_error",
}


def _demo_run(out, tiny_model_path: str, *flags: str):
    """40 steps of the demo on the tiny model, with ``flags`` on top; (config, run directory,
    sandbox directories it left behind)."""
    from launch.train import train

    config = load_config(
        "configs/demo.toml",
        [
            "--run.output_dir",
            str(out),
            "--run.name",
            "e2e",
            "--run.steps",
            "40",
            "--model.path",
            tiny_model_path,
            # The demo's settings, made faster to learn in 40 steps: a higher, constant step
            # size, and partial credit (an int earns a quarter, a near miss more), which the
            # demo leaves out because a constant answer earns most of it (docs/benchmarks.md).
            "--learner.lr",
            "3e-3",
            "--learner.lr_schedule",
            "constant",
            "--reward.terms.execution.options.mode",
            "partial",
            *flags,
        ],
    )
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "sandbox-*")))
    run_dir = train(config)
    new = set(glob.glob(os.path.join(tempfile.gettempdir(), "sandbox-*"))) - before
    # A directory whose pool process still runs is another run's on this machine (a shared /tmp),
    # not one this run left behind: the run's own pools have ended when ``train`` returns.
    return config, run_dir, {path for path in new if not alive(_pool_pid(path))}


@pytest.fixture(scope="module")
def short_run(tmp_path_factory, tiny_model_path):
    return _demo_run(
        tmp_path_factory.mktemp("runs"),
        tiny_model_path,
        # Periodic held-out evaluation through the same rollout fleet and sandbox.
        "--eval.every",
        "20",
        "--eval.n",
        "4",
        "--eval.k",
        "[1, 4]",
        # The engine and the learner in one placement-group bundle, taking turns (the
        # engine asleep while the learner steps): it must learn as well.
        "--rollout.colocate",
        "true",
        "--learner.offload_optimizer",
        "while_generating",
    )


def _assert_learned(run_dir) -> None:
    records = read_metrics(run_dir / "metrics.jsonl")
    first = statistics.fmean(r["reward/mean"] for r in records[:10])
    last = statistics.fmean(r["reward/mean"] for r in records[-10:])
    assert last > first + 0.2, (first, last)
    assert max(r["train/logprob_diff_mean"] for r in records) < 0.05


def _pool_pid(path: str) -> int:
    """The pool process named by ``sandbox-<pid>-<pid namespace>-<random>``."""
    return int(os.path.basename(path).split("-")[1])


def test_every_step_writes_the_metrics_interface(short_run):
    config, run_dir, _ = short_run
    records = read_metrics(run_dir / "metrics.jsonl")
    assert [r["step"] for r in records] == list(range(1, config.run.steps + 1))
    for record in records:
        assert record.keys() >= REQUIRED_METRICS, REQUIRED_METRICS - record.keys()
    assert [r["weight_version"] for r in records] == list(range(1, config.run.steps + 1))
    assert [r["colocate/wakes"] for r in records] == list(range(1, config.run.steps + 1))


def test_run_directory_has_config_checkpoint_and_curve(short_run):
    _, run_dir, _ = short_run
    assert (run_dir / "config.toml").is_file()
    assert (run_dir / "reward_curve.png").stat().st_size > 0
    assert (run_dir / "checkpoint" / "model.safetensors").is_file()
    assert (run_dir / "checkpoint" / "optimizer.pt").is_file()


def test_rewards_rise_and_sampler_matches_learner(short_run):
    _, run_dir, _ = short_run
    _assert_learned(run_dir)


def test_the_demo_learns_with_its_optimiser_step_on_the_host(tmp_path, tiny_model_path):
    """learner.offload_optimizer = "step": the policy inside FSDP2's CPU offload on one rank,
    no colocated engine needed; the demo learns as much, and its checkpoint is one rank's."""
    _, run_dir, leaked = _demo_run(tmp_path, tiny_model_path, "--learner.offload_optimizer", "step")
    _assert_learned(run_dir)
    assert (run_dir / "checkpoint" / "optimizer.pt").is_file()
    assert not leaked


def test_periodic_evaluation_reports_pass_at_k(short_run):
    _, run_dir, _ = short_run
    records = read_metrics(run_dir / "metrics.jsonl")
    evaluated = [r for r in records if "eval/pass@1" in r]
    assert [r["step"] for r in evaluated] == [20, 40]
    for record in evaluated:
        assert 0.0 <= record["eval/pass@1"] <= record["eval/pass@4"] <= 1.0
        assert record["eval/num_problems"] == 10  # the synthetic task's ten problems


def test_checkpoint_loads_in_transformers(short_run):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _, run_dir, _ = short_run
    model = AutoModelForCausalLM.from_pretrained(run_dir / "checkpoint")
    tokenizer = AutoTokenizer.from_pretrained(run_dir / "checkpoint")
    assert model.config.vocab_size == len(tokenizer)


def test_shutdown_leaves_no_sandbox_directory(short_run):
    *_, leaked = short_run
    assert not leaked, f"sandbox temp directories left behind: {sorted(leaked)}"
