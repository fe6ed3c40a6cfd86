"""The training loop: it schedules, the actors compute.

One step, synchronous (every completion is on-policy for the weights the learner starts from):

1. take ``prompts_per_step`` problems from the sampler;
2. every rollout worker generates G completions for its share of the prompts (vLLM, one seed
   per completion, tokens and sampler logprobs, tagged with the engine's weight version);
3. the sandbox pool executes every completion against its problem's tests; the reward is the
   execution reward (binary or partial credit), ``None`` when the sandbox itself failed;
4. advantages are normalised within each group over the samples that have a reward; masked
   samples are left out of the loss, never scored 0;
5. the learner takes one GRPO step and exports the new weights once; every rollout worker loads
   the same object from Ray's object store before the next step.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

from common.config import Config
from common.data import PromptSampler
from common.metrics import MetricsLog
from common.prompts import build_program
from common.types import Completion, ExecutionJob, Problem, RolloutRequest, TrainSample
from launch.cluster import Fleet

logger = logging.getLogger(__name__)


def group_advantages_masked(
    rewards: list[float | None], group_size: int, eps: float, scale: str = "group_std"
) -> list[float | None]:
    """Group-normalised advantages; ``None`` rewards stay ``None`` and are left out of the stats.

    A group with fewer than two rewarded samples has no baseline, so its samples get ``None``.
    With ``batch_std`` the divisor is the std of every rewarded sample in the batch.
    """
    import statistics

    import torch

    from learner.grpo import group_advantages

    scored = [r for r in rewards if r is not None]
    batch_scale = statistics.pstdev(scored) + eps if len(scored) > 1 else 1.0
    advantages: list[float | None] = [None] * len(rewards)
    for start in range(0, len(rewards), group_size):
        kept = [i for i in range(start, start + group_size) if rewards[i] is not None]
        if len(kept) < 2:
            continue
        values = torch.tensor([rewards[i] for i in kept], dtype=torch.float64)
        group_scale = "none" if scale == "batch_std" else scale
        group = group_advantages(values, len(kept), eps=eps, scale=group_scale)
        if scale == "batch_std":
            group = group / batch_scale
        for i, adv in zip(kept, group.tolist(), strict=True):
            advantages[i] = adv
    return advantages


def zero_std_fraction(rewards: list[float | None], group_size: int) -> float:
    """Fraction of groups whose rewarded samples all scored the same (no learning signal)."""
    groups = [rewards[i : i + group_size] for i in range(0, len(rewards), group_size)]
    flat = [len({r for r in group if r is not None}) <= 1 for group in groups]
    return sum(flat) / max(len(flat), 1)


@dataclass
class StepTimer:
    marks: dict[str, float] = field(default_factory=dict)
    _last: float = field(default_factory=time.perf_counter)

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.marks[f"time/{name}_s"] = now - self._last
        self._last = now


class Driver:
    """Runs the GRPO loop over a started :class:`Fleet`."""

    def __init__(
        self, config: Config, fleet: Fleet, problems: list[Problem], tokenizer, run_dir: Path
    ) -> None:
        self.config = config
        self.fleet = fleet
        self.problems = problems
        self.prompt_ids = [tuple(tokenizer(p.prompt)["input_ids"]) for p in problems]
        self.sampler = PromptSampler(len(problems), seed=config.run.seed)
        self.run_dir = run_dir
        self.weight_version = 0

    def run(self) -> None:
        total = self.config.run.steps
        log = MetricsLog(self.run_dir / "metrics.jsonl", total_steps=total)
        try:
            for step in range(1, total + 1):
                record = self.step(step)
                log.write(record)
                every = self.config.run.checkpoint_every
                if every and step % every == 0 and step < total:
                    self.save_checkpoint()
        finally:
            log.close()
        self.save_checkpoint()

    def step(self, step: int) -> dict[str, float]:
        import ray

        from sandbox.reward import execution_reward

        timer = StepTimer()
        rollout_cfg = self.config.rollout
        indices = self.sampler.next_indices(rollout_cfg.prompts_per_step)
        completions = self._generate(step, indices)
        timer.lap("rollout")

        problems = [
            self.problems[indices[i // rollout_cfg.group_size]] for i in range(len(completions))
        ]
        jobs = [
            ExecutionJob(build_program(p, c.text), p.tests, p.setup_code)
            for p, c in zip(problems, completions, strict=True)
        ]
        binary = self.config.sandbox.reward == "binary"
        results = ray.get(self.fleet.sandbox.run.remote(jobs, stop_at_first_failure=binary))
        rewards = [execution_reward(r, self.config.sandbox.reward) for r in results]
        sandbox_stats = ray.get(self.fleet.sandbox.stats.remote())
        timer.lap("reward")

        learner_cfg = self.config.learner
        advantages = group_advantages_masked(
            rewards, rollout_cfg.group_size, learner_cfg.advantage_eps, learner_cfg.advantage_scale
        )
        samples = [
            TrainSample(
                prompt_token_ids=c.prompt_token_ids,
                completion_token_ids=c.token_ids,
                sampler_logprobs=c.sampler_logprobs,
                advantage=adv,
                weight_version=c.weight_version,
                group_index=i // rollout_cfg.group_size,
            )
            for i, (c, adv) in enumerate(zip(completions, advantages, strict=True))
            if adv is not None and c.token_ids
        ]
        train_metrics = ray.get(self.fleet.learner.train_step.remote(samples))
        timer.lap("train")

        update = self.fleet.learner.export_weights.remote()
        ray.get([worker.update_weights.remote(update) for worker in self.fleet.rollout])
        self.weight_version = ray.get(update).version
        timer.lap("weight_sync")

        return self._record(step, completions, rewards, train_metrics, sandbox_stats, timer)

    def _generate(self, step: int, indices: list[int]) -> list[Completion]:
        """Split the step's prompts across the rollout workers and gather in prompt order."""
        import ray

        rng = random.Random(f"{self.config.run.seed}/rollout/{step}")
        group_size = self.config.rollout.group_size
        requests = [
            RolloutRequest(
                request_id=f"{step}/{k}",
                prompt_token_ids=self.prompt_ids[index],
                seeds=tuple(rng.getrandbits(31) for _ in range(group_size)),
            )
            for k, index in enumerate(indices)
        ]
        workers = self.fleet.rollout
        shares = [requests[i :: len(workers)] for i in range(len(workers))]
        futures = [
            w.generate.remote(share) for w, share in zip(workers, shares, strict=True) if share
        ]
        by_id = {(c.request_id, c.sample_index): c for batch in ray.get(futures) for c in batch}
        return [by_id[(r.request_id, g)] for r in requests for g in range(group_size)]

    def _record(
        self, step, completions, rewards, train_metrics, sandbox_stats, timer: StepTimer
    ) -> dict[str, float]:
        import statistics

        scored = [r for r in rewards if r is not None]
        lengths = [len(c.token_ids) for c in completions]
        step_s = sum(timer.marks.values())
        record: dict[str, float] = {
            "step": step,
            "weight_version": self.weight_version,
            "reward/mean": statistics.fmean(scored) if scored else 0.0,
            "reward/std": statistics.pstdev(scored) if len(scored) > 1 else 0.0,
            "reward/masked_frac": 1 - len(scored) / max(len(rewards), 1),
            "train/zero_std_frac": zero_std_fraction(rewards, self.config.rollout.group_size),
            "rollout/response_len_mean": statistics.fmean(lengths),
            "rollout/tokens_per_s": sum(lengths) / max(timer.marks["time/rollout_s"], 1e-9),
            "rollout/stale_versions": sum(
                c.weight_version != self.weight_version - 1 for c in completions
            ),
            "time/step_s": step_s,
        }
        record.update(train_metrics)
        record.update(sandbox_stats)
        record.update(timer.marks)
        return record

    def save_checkpoint(self) -> None:
        import ray

        path = self.run_dir / "checkpoint"
        ray.get(self.fleet.learner.save_checkpoint.remote(str(path)))
        logger.info("checkpoint saved to %s", path)
