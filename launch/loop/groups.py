"""Collecting a step's groups: prompts, generate, execute, reward, round by round.

A *group* is one problem with its G completions, their sandbox results and rewards.
:meth:`GroupCollector.collect` draws the step's groups from the sampling policy
(``algorithm.advantage.dynamic``), which calls :meth:`GroupCollector.sample_draw` back for each
of its draws; then the self-play groups, when ``selfplay.saboteur`` is on.

Rewards are the weighted sum of the configured terms (``algorithm.rewards``). Each group keeps
every term's values, so the step's ``reward/<term>/mean`` is computed over the groups actually
trained on. A multi-turn episode's reward with ``first_success_discounted`` and a saboteur
group's are not that sum, so with either the term means need not add up to ``reward/mean``.

``reward/scored_completions`` counts the completions of every round that got a reward, dropped
groups included: zero means the step had nothing to train on (``launch.loop.masked_steps``).
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial

import ray

from algorithm.advantage import Draw, sample_groups
from algorithm.rewards import RewardInput, build_reward, episode_rewards, term_metrics
from common.config import Config
from common.prompts import build_program, encode_prompt
from common.types import Completion, ExecutionJob, ExecutionResult, Problem, RolloutRequest
from launch.data.problems import load_raw, rendered_template
from launch.fleet.scorer import ScorerTerm
from launch.loop.episodes import Episode, EpisodeRunner
from launch.loop.masked_steps import SCORED
from launch.selfplay.saboteur import Saboteur


@dataclass
class Group:
    index: int  # the problem's index in the training set
    completions: list[Completion]
    results: list[ExecutionResult]
    rewards: list[float | None]
    terms: dict[str, list[float | None]] = field(default_factory=dict)  # each term's values
    programs: list[str] = field(default_factory=list)  # what the sandbox ran, per completion
    #: ``solver`` (the training problem itself), or a self-play role (``launch.selfplay.saboteur``):
    #: ``saboteur`` or ``fixer``, which pose a prompt of their own built from that problem.
    role: str = "solver"
    posed: Problem | None = None  # the problem posed, when it is not the training problem


class GroupCollector:
    """Turns prompt indices into scored groups using the fleet's rollout and sandbox actors.

    With ``episode.max_turns > 1`` each completion is an episode (``launch.loop.episodes``): the
    later turns run once every group's first turn is judged, all episodes together.
    """

    def __init__(
        self, config: Config, fleet, problems: list[Problem], prompt_ids: list, tokenizer=None
    ) -> None:
        self.config = config
        self.fleet = fleet
        self.problems = problems
        self.prompt_ids = prompt_ids
        self.seconds = {"rollout": 0.0, "reward": 0.0}
        self.term_means: dict[str, float | None] = {}
        self.tokenizer = tokenizer
        self.episodes = None
        if config.episode.max_turns > 1:
            if tokenizer is None:
                raise ValueError("multi-turn episodes need the tokenizer to write feedback")
            self.episodes = EpisodeRunner(config, tokenizer, fleet.rollout.generate, self._execute)
        self.saboteur = None
        if config.selfplay.saboteur:
            data = config.data
            raw = load_raw(data.source, data.split, data.format, data.max_problems)
            template = rendered_template(data, tokenizer)
            self.saboteur = Saboteur(
                config, raw, template, tokenizer, self.sample, self._execute_with
            )
        scorers = getattr(fleet, "scorers", None) or {}
        self.reward = build_reward(
            config.reward,
            config.rollout.max_new_tokens,
            {name: ScorerTerm(handle) for name, handle in scorers.items()},
        )

    def collect(self, step: int, next_indices) -> tuple[list[Group], dict[str, float]]:
        """The step's groups; ``next_indices(count)`` draws prompts (the curriculum's sampler).

        The solver groups as the sampling policy (``algorithm.advantage.dynamic``) asks for them,
        round by round (:meth:`sample_draw`), then the self-play groups.
        """
        self.seconds = {"rollout": 0.0, "reward": 0.0}
        if self.episodes is not None:
            self.seconds["episode"] = 0.0
        wanted = self.config.rollout.prompts_per_step
        if self.saboteur is not None:
            wanted -= self.config.selfplay.saboteur_prompts
        solved = sample_groups(
            partial(self.sample_draw, step), next_indices, wanted, self.config.algorithm.advantage
        )
        groups, metrics, sampled = solved.groups, solved.metrics, solved.sampled
        if self.saboteur is not None:
            drawn = next_indices(self.config.selfplay.saboteur_prompts)
            played, selfplay_metrics = self.saboteur.collect(step, drawn)
            groups, metrics = groups + played, {**metrics, **selfplay_metrics}
            sampled = sampled + played
        metrics[SCORED] = float(sum(r is not None for g in sampled for r in g.rewards))
        self.term_means = term_metrics(
            {name: [v for g in groups for v in g.terms.get(name, [])] for name in self._names()}
        )
        return groups, metrics

    def sample_draw(self, step: int, draw: Draw) -> list[Group]:
        """The groups of one of the policy's draws in step ``step``. Its tag names the step, the
        round and a hot draw: it seeds the rollout, so a resumed run samples the same."""
        tag = f"{step}.{draw.round}" if draw.round else str(step)
        if draw.temperature is not None:
            tag = f"{tag}.hot"
        return self.sample(tag, draw.indices, temperature=draw.temperature)

    def _judge(self, jobs: list[ExecutionJob]):
        """A ref of the sandbox's results for ``jobs``, stopping at the first failing test
        unless the reward needs every test's verdict."""
        stop_early = self.config.reward.stops_at_first_failure()
        return self.fleet.sandbox.run(jobs, stop_at_first_failure=stop_early)

    def _execute(self, jobs: list[ExecutionJob]) -> list[ExecutionResult]:
        return ray.get(self._judge(jobs))

    def _execute_with(
        self, jobs: list[ExecutionJob], stop_at_first_failure: bool
    ) -> list[ExecutionResult]:
        """The sandbox's results for ``jobs``, stopping as told (the saboteur's bug checks)."""
        return ray.get(self.fleet.sandbox.run(jobs, stop_at_first_failure=stop_at_first_failure))

    def _names(self) -> list[str]:
        return [term.name for term in self.reward.terms]

    def sample(
        self,
        tag: str,
        indices: list[int],
        temperature: float | None = None,
        posed: list[Problem] | None = None,
    ) -> list[Group]:
        """G completions for each prompt (at ``temperature``, default ``rollout.temperature``),
        executed and rewarded. ``posed``: the problems to pose instead of the training problems
        at ``indices`` (a prompt of their own, rendered, and their tests).

        Groups go to the sandbox as soon as their engine has finished them (one sandbox call per
        arrival), so execution overlaps the generation of the other groups;
        ``seconds["reward"]`` is only the part after the last group arrived (what the step
        waits for).
        """
        problems = posed or [self.problems[i] for i in indices]
        with self._timed("rollout"):  # prompts, generate, and execute as groups arrive
            requests = self._requests(tag, self._prompt_ids(indices, posed), temperature)
            completions, programs, arrivals = self._generate_and_judge(requests, problems)
        with self._timed("reward"):
            results = _results_by_request(arrivals, completions)  # the last verdicts
        last = [list(group) for group in completions]  # each sample's last turn
        if self.episodes is not None:
            with self._timed("episode"):
                self._run_episodes(tag, problems, completions, programs, results, last)
        with self._timed("reward"):
            rewards, by_term = self._rewards(problems, completions, last, programs, results)
        size = self.config.rollout.group_size

        def part(values: list, k: int) -> list:
            return values[k * size : (k + 1) * size]

        return [
            Group(
                index,
                completions[k],
                results[k],
                part(rewards, k),
                {name: part(values, k) for name, values in by_term.items()},
                programs[k],
                posed=posed[k] if posed else None,
            )
            for k, index in enumerate(indices)
        ]

    @contextlib.contextmanager
    def _timed(self, phase: str) -> Iterator[None]:
        """Adds the block's wall time to ``seconds[phase]`` (a step's rounds add up)."""
        start = time.perf_counter()
        yield
        self.seconds[phase] += time.perf_counter() - start

    def _generate_and_judge(
        self, requests: list[RolloutRequest], problems: list[Problem]
    ) -> tuple[list[list[Completion]], list[list[str]], list[tuple[list[int], object]]]:
        """Every request's completions and programs, in request order, and the sandbox calls
        made as groups arrived: (request positions, ObjectRef of their results)."""
        position = {request.request_id: k for k, request in enumerate(requests)}
        completions: list[list[Completion]] = [[] for _ in requests]
        programs: list[list[str]] = [[] for _ in requests]
        arrivals = []
        for groups in self.fleet.rollout.generate_stream(requests):
            jobs, arrived = [], []
            for group in groups:
                k = position[group[0].request_id]
                problem = problems[k]
                completions[k] = group
                programs[k] = [build_program(problem, c.text) for c in group]
                jobs += [problem.job(code) for code in programs[k]]
                arrived.append(k)
            arrivals.append((arrived, self._judge(jobs)))
        missing = [r.request_id for r, done in zip(requests, completions, strict=True) if not done]
        if missing:
            raise RuntimeError(f"the rollout fleet returned no completions for {missing}")
        return completions, programs, arrivals

    def _rewards(
        self, problems, completions, last, programs, results
    ) -> tuple[list[float | None], dict[str, list[float | None]]]:
        """Every sample's reward (an episode's discounted by its turns) and each term's values,
        flat in request order."""
        batch = [
            RewardInput(problems[k], turn.text, code, result, len(turn.token_ids))
            for k in range(len(completions))
            for turn, code, result in zip(last[k], programs[k], results[k], strict=True)
        ]
        scored = self.reward(batch)
        ends = [
            (c.turns, r.passed)
            for group, rs in zip(completions, results)
            for c, r in zip(group, rs)
        ]
        return episode_rewards(scored.rewards, ends, self.config.episode), scored.by_term

    def _run_episodes(self, tag, problems, completions, programs, results, last) -> None:
        """Turns 2..T of every sample (``launch.loop.episodes``), in place: each sample's
        transcript, last program and verdict, and ``last`` its last turn."""
        size = self.config.rollout.group_size
        episodes = [
            Episode(problems[k], c, c, programs[k][j], results[k][j])
            for k, group in enumerate(completions)
            for j, c in enumerate(group)
        ]
        for n, episode in enumerate(self.episodes.run(tag, episodes)):
            k, j = divmod(n, size)
            completions[k][j] = episode.transcript
            last[k][j] = episode.last_turn
            programs[k][j] = episode.program
            results[k][j] = episode.result

    def _prompt_ids(self, indices: list[int], posed: list[Problem] | None) -> list:
        """The token ids of each prompt: the training set's, encoded once, or the posed ones'."""
        if posed:
            return [tuple(encode_prompt(self.tokenizer, p.prompt)) for p in posed]
        return [self.prompt_ids[i] for i in indices]

    def _requests(
        self, tag: str, prompt_ids: list, temperature: float | None = None
    ) -> list[RolloutRequest]:
        """One request per prompt with G seeds, derived from (run seed, step tag)."""
        rng = random.Random(f"{self.config.run.seed}/rollout/{tag}")
        size = self.config.rollout.group_size
        return [
            RolloutRequest(
                request_id=f"{tag}/{k}",
                prompt_token_ids=ids,
                seeds=tuple(rng.getrandbits(31) for _ in range(size)),
                temperature=temperature,
            )
            for k, ids in enumerate(prompt_ids)
        ]


def _results_by_request(
    arrivals: list[tuple[list[int], object]], completions: list[list[Completion]]
) -> list[list[ExecutionResult]]:
    """The sandbox's results of every request, in request order, from the calls made as groups
    arrived (each call's results are its groups' completions, in turn)."""
    results: list[list[ExecutionResult]] = [[] for _ in completions]
    for (arrived, _), executed in zip(arrivals, ray.get([ref for _, ref in arrivals])):
        offset = 0
        for k in arrived:
            results[k] = executed[offset : offset + len(completions[k])]
            offset += len(completions[k])
    return results
