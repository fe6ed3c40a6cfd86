"""Collecting a step's groups: rollout, execution, rewards, and dynamic sampling around them.

A *group* is one problem with its G completions, their sandbox results and rewards. With
``rollout.dynamic_sampling`` a group whose rewards are all equal (no learning signal, zero
advantage) is dropped and more prompts are sampled, up to ``rollout.max_sampling_rounds``
rounds, until the step has ``prompts_per_step`` informative groups (DAPO's dynamic sampling).

Rewards are the weighted sum of the configured terms (``common.rewards``; by default the
execution reward alone, as before). Each group keeps every term's values, so the step's
``reward/<term>/mean`` is computed over the groups actually trained on (``term_means``).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.config import Config
from common.prompts import build_program
from common.rewards import (
    RewardInput,
    ScorerTerm,
    build_reward,
    resolve_scorer_path,
    term_metrics,
)
from common.types import Completion, ExecutionJob, ExecutionResult, Problem, RolloutRequest


def start_scorer(config: Config, run_id: str) -> dict[str, Any]:
    """One ready scorer actor per learned-scorer term, by term name (empty when none).

    Each asks for its term's ``num_cpus``/``num_gpus``; ``builtin:tiny-scorer`` is built offline
    under ``run.output_dir/_models`` first, like ``builtin:tiny``.
    """
    import ray

    from actor.scorer import RewardScorer
    from launch.cluster import actor_options

    handles = {}
    for name, options in config.reward.scorer_terms().items():
        path = resolve_scorer_path(options.path, Path(config.run.output_dir) / "_models")
        remote_cls = ray.remote(RewardScorer).options(
            **actor_options(f"scorer-{run_id}-{name}", options.num_cpus, options.num_gpus)
        )
        handles[name] = remote_cls.remote(path, options)
    ray.get([handle.__ray_ready__.remote() for handle in handles.values()])
    return handles


@dataclass
class Group:
    index: int  # the problem's index in the training set
    completions: list[Completion]
    results: list[ExecutionResult]
    rewards: list[float | None]
    terms: dict[str, list[float | None]] = field(default_factory=dict)  # each term's values


class GroupCollector:
    """Turns prompt indices into scored groups using the fleet's rollout and sandbox actors."""

    def __init__(self, config: Config, fleet, problems: list[Problem], prompt_ids: list) -> None:
        self.config = config
        self.fleet = fleet
        self.problems = problems
        self.prompt_ids = prompt_ids
        self.seconds = {"rollout": 0.0, "reward": 0.0}
        self.term_means: dict[str, float] = {}
        scorers = getattr(fleet, "scorers", None) or {}
        self.reward = build_reward(
            config.reward,
            config.sandbox.reward,
            config.rollout.max_new_tokens,
            {name: ScorerTerm(handle) for name, handle in scorers.items()},
        )

    def collect(self, step: int, next_indices) -> tuple[list[Group], dict[str, float]]:
        """The step's groups; ``next_indices(count)`` draws prompts (the curriculum's sampler)."""
        from learner.sampling import dynamic_sample

        self.seconds = {"rollout": 0.0, "reward": 0.0}
        rollout = self.config.rollout
        wanted = rollout.prompts_per_step

        def sample_round(round_index: int, count: int) -> list[Group]:
            return self.sample(
                f"{step}.{round_index}" if round_index else str(step), next_indices(count)
            )

        if not rollout.dynamic_sampling:
            groups, metrics = sample_round(0, wanted), {}
        else:
            groups, metrics = dynamic_sample(
                sample_round, lambda group: group.rewards, wanted, rollout.max_sampling_rounds
            )
        self.term_means = term_metrics(
            {name: [v for g in groups for v in g.terms.get(name, [])] for name in self._names()}
        )
        return groups, metrics

    def _names(self) -> list[str]:
        return [term.name for term in self.reward.terms]

    def sample(self, tag: str, indices: list[int]) -> list[Group]:
        """G completions for each prompt, executed and rewarded."""
        import ray

        start = time.perf_counter()
        completions = self._generate(tag, indices)
        self.seconds["rollout"] += time.perf_counter() - start

        start = time.perf_counter()
        size = self.config.rollout.group_size
        problems = [self.problems[indices[k // size]] for k in range(len(completions))]
        programs = [build_program(p, c.text) for p, c in zip(problems, completions, strict=True)]
        jobs = [ExecutionJob(code, p.tests, p.setup_code) for code, p in zip(programs, problems)]
        mode = self.config.sandbox.reward
        results = ray.get(
            self.fleet.sandbox.run.remote(jobs, stop_at_first_failure=mode == "binary")
        )
        batch = [
            RewardInput(problem, completion.text, program, result, len(completion.token_ids))
            for problem, completion, program, result in zip(
                problems, completions, programs, results, strict=True
            )
        ]
        scored = self.reward(batch)
        self.seconds["reward"] += time.perf_counter() - start

        def part(values: list, k: int) -> list:
            return values[k * size : (k + 1) * size]

        return [
            Group(
                index,
                part(completions, k),
                part(results, k),
                part(scored.rewards, k),
                {name: part(values, k) for name, values in scored.by_term.items()},
            )
            for k, index in enumerate(indices)
        ]

    def _generate(self, tag: str, indices: list[int]) -> list[Completion]:
        """G completions per prompt from the fleet, in prompt then sample order."""
        rng = random.Random(f"{self.config.run.seed}/rollout/{tag}")
        size = self.config.rollout.group_size
        requests = [
            RolloutRequest(
                request_id=f"{tag}/{k}",
                prompt_token_ids=self.prompt_ids[index],
                seeds=tuple(rng.getrandbits(31) for _ in range(size)),
            )
            for k, index in enumerate(indices)
        ]
        by_id = {(c.request_id, c.sample_index): c for c in self.fleet.rollout.generate(requests)}
        return [by_id[(r.request_id, g)] for r in requests for g in range(size)]
