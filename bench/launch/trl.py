"""The TRL baseline of ``python -m bench.launch --vs-trl``: TRL's ``GRPOTrainer`` on the same work.

Same model directory (weights and tokenizer), same prompts in the same order (the synthetic
task's programs, ``prompts_per_step`` per step, G completions each), same completion length
(``max_completion_length`` = ``rollout.max_new_tokens``; with ``fixed_length`` EOS is blocked
with ``min_new_tokens``), same sampling temperature and top-p, and the same reward: TRL calls a
reward function that executes every completion against the problem's tests in this project's
sandbox pool (``sandbox.trusted.pool.SandboxPool`` + ``sandbox.reward.execution_reward``), so
rewards come from code execution through TRL's own pipeline.

One optimiser step consumes ``batch_size`` completions: TRL generates the whole batch at once
(``generation_batch_size = batch_size``) and accumulates gradients over ``grad_accum``
micro-batches of ``batch_size / grad_accum`` completions. TRL generates with Hugging Face
``generate`` on CPU (``use_vllm=False``). Precision follows our learner: with
``learner.dtype = "bfloat16"`` TRL gets ``bf16=True`` (float32 weights, bf16 autocast through
accelerate, which covers its generation too), the same mixed precision our learner uses;
otherwise float32 throughout. KL weight ``beta`` and the GRPO loss aggregation follow our
learner config.

TRL is imported lazily; install it with ``pip install '.[bench]'``.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

from common.config import Config
from common.prompts import build_program
from common.types import Problem
from sandbox.reward import execution_reward
from sandbox.trusted.pool import SandboxPool

INSTALL_HINT = "TRL is not installed: pip install '.[bench]' (the bench extra pins trl)"

# our learner's loss aggregation -> TRL's loss_type
_LOSS_TYPE = {
    "seq_mean_token_mean": "grpo",
    "token_mean": "dapo",
    "seq_mean_token_sum_norm": "dr_grpo",
}


def import_trl():
    """``(GRPOConfig, GRPOTrainer)``; a clear error when TRL is missing."""
    try:
        from trl import GRPOConfig, GRPOTrainer  # lazy: the optional bench extra
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise RuntimeError(f"{INSTALL_HINT} ({exc})") from None
    return GRPOConfig, GRPOTrainer


@dataclass
class TrlStep:
    step_s: float
    generate_s: float  # TRL's generate-and-score, reward time excluded
    reward_s: float
    samples: int
    completion_tokens: int


@dataclass
class TrlRun:
    steps: list[TrlStep] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    trl_version: str = ""


def run_trl(
    config: Config,
    model_path: str,
    problems: list[Problem],
    prompt_order: list[int],
    steps: int,
    output_dir: str,
    *,
    fixed_length: bool,
    grad_accum: int,
    threads: int,
) -> TrlRun:
    """Run TRL's GRPO for ``steps`` optimiser steps; per-step times and token counts."""
    # lazy: torch, transformers, datasets and TRL (the optional bench extra) load only for --vs-trl
    import torch
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _, GRPOTrainer = import_trl()
    torch.set_num_threads(threads)
    batch = config.rollout.batch_size
    if batch % grad_accum:
        raise ValueError(f"batch_size ({batch}) must be a multiple of grad_accum ({grad_accum})")
    # One row per prompt drawn, in the order our driver drew them; TRL's sampler repeats each
    # row G times. shuffle_dataset=False keeps that order.
    dataset = Dataset.from_list(
        [{"prompt": problems[i].prompt, "problem_index": i} for i in prompt_order]
    )
    args = _grpo_config(config, steps, output_dir, fixed_length=fixed_length, grad_accum=grad_accum)
    run = TrlRun(trl_version=trl.__version__)
    timing = {"reward": 0.0, "generate": 0.0, "tokens": 0, "samples": 0}
    pool = SandboxPool(config.sandbox)
    mode = "binary" if config.reward.stops_at_first_failure() else "partial"
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    tokenizer.padding_side = "left"
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[_execution_reward(problems, pool, mode, timing, run)],
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[_step_times(timing, run)],
    )
    original = trainer._generate_and_score_completions

    def timed_generate_and_score(*a, **k):
        start = time.perf_counter()
        try:
            return original(*a, **k)
        finally:
            timing["generate"] += time.perf_counter() - start

    trainer._generate_and_score_completions = timed_generate_and_score
    try:
        trainer.train()
    finally:
        pool.close()
    return run


def _grpo_config(
    config: Config, steps: int, output_dir: str, *, fixed_length: bool, grad_accum: int
):
    """TRL's ``GRPOConfig`` for the same work as our run (see the module docstring)."""
    GRPOConfig, _ = import_trl()
    rollout, learner, loss = config.rollout, config.learner, config.algorithm.loss
    batch = rollout.batch_size
    generation_kwargs = {"min_new_tokens": rollout.max_new_tokens} if fixed_length else {}
    return GRPOConfig(
        output_dir=output_dir,
        max_steps=steps,
        learning_rate=learner.lr,
        weight_decay=learner.weight_decay,
        max_grad_norm=learner.max_grad_norm,
        lr_scheduler_type="constant",
        warmup_steps=0,
        per_device_train_batch_size=batch // grad_accum,
        gradient_accumulation_steps=grad_accum,
        generation_batch_size=batch,
        num_generations=rollout.group_size,
        max_completion_length=rollout.max_new_tokens,
        temperature=rollout.temperature,
        top_p=rollout.top_p,
        generation_kwargs=generation_kwargs,
        beta=loss.beta,
        epsilon=loss.clip_eps_low,
        epsilon_high=loss.clip_eps_high,
        num_iterations=learner.ppo_epochs,
        loss_type=_LOSS_TYPE[loss.aggregation],
        scale_rewards="group" if config.algorithm.advantage.scale == "group_std" else "none",
        use_vllm=False,
        use_cpu=True,
        bf16=learner.dtype == "bfloat16",
        fp16=False,
        shuffle_dataset=False,
        seed=config.run.seed,
        data_seed=config.run.seed,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        dataloader_num_workers=0,
        log_completions=False,
        # TRL checkpoints all layers or none: any checkpointed layer of ours counts as all
        # ("auto" resolves only in our learner, from the model's shape: none here)
        gradient_checkpointing=learner.checkpoints_layers,
    )


def _execution_reward(problems: list[Problem], pool: SandboxPool, mode: str, timing: dict, run):
    """TRL's reward function: every completion executed against its problem's tests in our
    sandbox pool; counts samples, tokens and reward time into ``timing``."""

    def code_execution_reward(prompts, completions, completion_ids, problem_index, **_):
        start = time.perf_counter()
        jobs = []
        for text, index in zip(completions, problem_index, strict=True):
            problem = problems[index]
            jobs.append(problem.job(build_program(problem, text)))
        results = pool.run(jobs, stop_at_first_failure=mode == "binary")
        rewards = [execution_reward(r, mode) for r in results]
        timing["samples"] += len(completions)
        timing["tokens"] += sum(len(ids) for ids in completion_ids)
        timing["reward"] += time.perf_counter() - start
        run.rewards.extend(r for r in rewards if r is not None)
        return rewards  # None (sandbox infra error) is ignored by TRL's nan-aware sum

    code_execution_reward.__name__ = "code_execution_reward"
    return code_execution_reward


def _step_times(timing: dict, run: TrlRun):
    """A trainer callback that appends each optimiser step's times and counts to ``run``."""
    from transformers import TrainerCallback  # lazy: the optional bench path only

    class StepTimes(TrainerCallback):
        def __init__(self) -> None:
            self.last = time.perf_counter()

        def on_train_begin(self, *a, **k):
            self.last = time.perf_counter()

        def on_step_end(self, *a, **k):
            now = time.perf_counter()
            run.steps.append(
                TrlStep(
                    step_s=now - self.last,
                    generate_s=timing["generate"] - timing["reward"],
                    reward_s=timing["reward"],
                    samples=int(timing["samples"]),
                    completion_tokens=int(timing["tokens"]),
                )
            )
            timing.update(reward=0.0, generate=0.0, tokens=0, samples=0)
            self.last = now

    return StepTimes()


def summarize_trl(run: TrlRun, warmup: int) -> dict[str, float]:
    """Medians over the steps after ``warmup``, and throughput over those steps' totals."""
    measured = run.steps[warmup:] or run.steps
    total_s = sum(s.step_s for s in measured)
    return {
        "steps_measured": len(measured),
        "step_s": statistics.median(s.step_s for s in measured),
        "rollout_s": statistics.median(s.generate_s for s in measured),
        "reward_s": statistics.median(s.reward_s for s in measured),
        "train_s": statistics.median(s.step_s - s.generate_s - s.reward_s for s in measured),
        "samples_per_s": sum(s.samples for s in measured) / total_s,
        "tokens_per_s": sum(s.completion_tokens for s in measured) / total_s,
        "response_len_mean": sum(s.completion_tokens for s in measured)
        / max(sum(s.samples for s in measured), 1),
        "reward_mean": statistics.fmean(run.rewards) if run.rewards else 0.0,
    }
