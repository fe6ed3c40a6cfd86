"""Collecting a step's groups: rollout, execution, rewards, and dynamic sampling around them.

A *group* is one problem with its G completions, their sandbox results and rewards. With
``rollout.dynamic_sampling`` a group whose rewards are all equal (no learning signal, zero
advantage) is dropped and more prompts are sampled, up to ``rollout.max_sampling_rounds``
rounds, until the step has ``prompts_per_step`` informative groups (DAPO's dynamic sampling).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from common.config import Config
from common.prompts import build_program
from common.types import Completion, ExecutionJob, ExecutionResult, Problem, RolloutRequest


@dataclass
class Group:
    index: int  # the problem's index in the training set
    completions: list[Completion]
    results: list[ExecutionResult]
    rewards: list[float | None]


class GroupCollector:
    """Turns prompt indices into scored groups using the fleet's rollout and sandbox actors."""

    def __init__(self, config: Config, fleet, problems: list[Problem], prompt_ids: list) -> None:
        self.config = config
        self.fleet = fleet
        self.problems = problems
        self.prompt_ids = prompt_ids
        self.seconds = {"rollout": 0.0, "reward": 0.0}

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
            return sample_round(0, wanted), {}
        return dynamic_sample(
            sample_round, lambda group: group.rewards, wanted, rollout.max_sampling_rounds
        )

    def sample(self, tag: str, indices: list[int]) -> list[Group]:
        """G completions for each prompt, executed and rewarded."""
        import ray

        from sandbox.reward import execution_reward

        start = time.perf_counter()
        completions = self._generate(tag, indices)
        self.seconds["rollout"] += time.perf_counter() - start

        start = time.perf_counter()
        size = self.config.rollout.group_size
        jobs = []
        for k, completion in enumerate(completions):
            problem = self.problems[indices[k // size]]
            program = build_program(problem, completion.text)
            jobs.append(ExecutionJob(program, problem.tests, problem.setup_code))
        mode = self.config.sandbox.reward
        results = ray.get(
            self.fleet.sandbox.run.remote(jobs, stop_at_first_failure=mode == "binary")
        )
        rewards = [execution_reward(result, mode) for result in results]
        self.seconds["reward"] += time.perf_counter() - start
        return [
            Group(index, completions[k * size : (k + 1) * size], results[k * size : (k + 1) * size],
                  rewards[k * size : (k + 1) * size])
            for k, index in enumerate(indices)
        ]  # fmt: skip

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
