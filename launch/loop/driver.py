"""The training loop: it schedules, the actors compute.

One step, :meth:`Driver.step`, synchronous (every completion is on-policy for the weights the
learner starts from):

1. prompts: ``prompts_per_step`` problems from the curriculum's sampler;
2. generate: every rollout worker generates G completions for its share of the prompts (vLLM,
   one seed per completion, tokens and sampler logprobs, tagged with the engine's weight
   version);
3. execute: the sandbox pool executes every completion against its problem's tests, each group
   as soon as it is generated;
4. reward: the configured terms' weighted sum (by default the execution reward, binary or
   partial credit), ``None`` when the sandbox itself failed;
5. advantages: normalised within each group over the samples that have a reward; masked samples
   are left out of the loss, never scored 0;
6. train: the learner takes one GRPO step and exports the new weights once;
7. push: every rollout worker loads the same weights before the next step (``push.py``);
8. record: the step's metrics (``metrics.jsonl``, ``docs/metrics.md``) and rollouts.

Steps 1-4 are the batch (:meth:`Driver.collect`, ``groups.py``), sampled round by round as the
sampling policy asks (``algorithm.advantage.dynamic``: dynamic sampling, hot resampling). With
``async.max_staleness >= 1`` steps 1-4 of the next step run while the learner does 5-7 (see
``pipeline.py``): the batch's groups are checked against the learner's weight version, stale
ones dropped and counted, and the rest trained on with the TIS correction. With
``rollout.colocate`` the engines sleep while the learner does 6 (``colocation.py``).
"""

from __future__ import annotations

import contextlib
import logging
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from algorithm.advantage import running_baseline, step_advantages, zero_std_fraction
from algorithm.kl_control import kl_in_reward
from algorithm.staleness import split_stale, staleness_metrics
from common.config import Config
from common.durable import append_jsonl
from common.types import Completion, TrainSample, Verdict
from launch.data.curriculum import make_curriculum
from launch.data.problems import RunProblems
from launch.fleet.actors import start_metrics
from launch.fleet.fleet import Fleet
from launch.loop.checkpoint import DriverState, save_checkpoint
from launch.loop.colocation import Colocation
from launch.loop.control import CONTROL_FILE, ControlFile, install_stop_handler
from launch.loop.episodes import episode_metrics
from launch.loop.evaluation import evaluate
from launch.loop.flat_steps import FlatSteps
from launch.loop.groups import Group, GroupCollector
from launch.loop.masked_steps import MaskedStepLimit, MaskedStepsError
from launch.loop.metrics import MetricsLog
from launch.loop.parity import ParityProbe
from launch.loop.pipeline import Batch, OnDemandBatches, PipelinedBatches
from launch.loop.push import TrainAndPush
from launch.loop.rollouts import RolloutWriter, step_rows
from launch.loop.telemetry import Telemetry

logger = logging.getLogger(__name__)


@dataclass
class StepTimer:
    """The step's ``time/<phase>_s`` marks; :meth:`lap` times the phase that just ended."""

    marks: dict[str, float] = field(default_factory=dict)
    _last: float = field(default_factory=time.perf_counter)

    @classmethod
    def after(cls, seconds: dict[str, float]) -> StepTimer:
        """A timer that starts now, holding the phases measured while collecting the batch."""
        return cls({f"time/{name}_s": value for name, value in seconds.items()})

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.marks[f"time/{name}_s"] = now - self._last
        self._last = now

    def add(self, marks: dict[str, float]) -> None:
        """Timings measured elsewhere; a phase timed in two parts adds up."""
        for name, seconds in marks.items():
            self.marks[name] = self.marks.get(name, 0.0) + seconds


class Driver:
    """Runs the GRPO loop over a started :class:`Fleet`; resumable from a :class:`DriverState`."""

    def __init__(
        self,
        config: Config,
        fleet: Fleet,
        problems: RunProblems,
        tokenizer,
        run_dir: Path,
        state: DriverState | None = None,
    ) -> None:
        self.config = config
        self.fleet = fleet
        self.problems = problems.train
        self.tokenizer = tokenizer
        self.collector = GroupCollector(
            config, fleet, problems.train, problems.prompt_ids, tokenizer
        )
        self.run_dir = run_dir
        self.start_step = state.step if state else 0
        self.weight_version = state.weight_version if state else 0
        data = config.data
        self.curriculum = make_curriculum(
            data.curriculum,
            problems.train,
            config.run.seed,
            ema=data.curriculum_ema,
            ramp_draws=data.curriculum_ramp_steps,
        )
        if state is not None:
            self.curriculum.load_state_dict(state.curriculum)
        self.baseline = running_baseline(config.algorithm.advantage)
        if state is not None and self.baseline is not None:
            self.baseline.load_state_dict(state.baseline)
        self.eval_problems = problems.held_out
        self.colocation = Colocation.of(config, fleet)  # one GPU per engine and learner rank
        fixed = config.rollout.num_actors if self.colocation else None
        self.control = ControlFile(run_dir / CONTROL_FILE, fixed_size=fixed)
        self._stop_signal: int | None = None
        self.probe = ParityProbe(config.weights.parity_probe)
        self.train_and_push = TrainAndPush(fleet, self.probe, self.colocation)
        run = config.run
        self.rollouts = (
            RolloutWriter(
                run_dir / "rollouts",
                run.rollouts_file_mib,
                run.rollouts_max_mib,
                resumed_after=self.start_step if state else None,
            )
            if run.save_rollouts
            else None
        )
        self._batches: OnDemandBatches | PipelinedBatches = OnDemandBatches(self.collect)

    def run(self) -> None:
        """Train up to ``run.steps``; checkpoint every N steps, on SIGTERM and at the end."""
        total = self.config.run.steps
        log = MetricsLog(
            self.run_dir / "metrics.jsonl", total_steps=total, first_step=self.start_step
        )
        telemetry = Telemetry(self.run_dir, start_metrics(self.config.run.name))
        masked = MaskedStepLimit(self.config.run.max_masked_steps)
        flat = FlatSteps()
        restore = install_stop_handler(self._request_stop)
        try:
            with contextlib.closing(self.records(self.start_step + 1, total)) as records:
                for record in records:
                    step = int(record["step"])
                    every_eval = self.config.eval.every
                    if every_eval and (step % every_eval == 0 or step == total):
                        with self._batches.paused():
                            record.update(self.evaluate())
                    log.write(record)
                    telemetry.record(record)
                    untrainable = masked.observe(record)
                    flat.observe(record)
                    every = self.config.run.checkpoint_every
                    stopping = self._stop_signal is not None
                    if (every and step % every == 0) or stopping or untrainable or step == total:
                        self.save_checkpoint(step)
                    if untrainable:
                        raise MaskedStepsError(
                            f"{untrainable}. Stopped with a checkpoint at step {step} (the "
                            "policy did not change in those steps): once the cause is fixed, "
                            f"continue with python -m launch.train --resume {self.run_dir}"
                        )
                    if stopping:
                        signum = self._stop_signal
                        logger.warning("stopped by signal %d after step %d", signum, step)
                        break
        finally:
            restore()
            log.close()
            telemetry.close()

    def records(self, first: int, last: int) -> Iterator[dict[str, float]]:
        """Run steps ``first..last``, yielding each step's metric record.

        Synchronous, or with a producer collecting batches ahead when
        ``async.max_staleness >= 1``; closing the generator stops the producer.
        """
        depth = self.config.async_.max_staleness
        if depth:
            collect = self.collect
            if self.config.async_.learner_threads_during_rollout:
                collect = self._collect_beside_learner
            self._batches = PipelinedBatches(collect, first, last, depth)
        try:
            for step in range(first, last + 1):
                yield self.step(step)
        finally:
            self._batches.close()
            self._batches = OnDemandBatches(self.collect)

    def _request_stop(self, signum: int) -> None:
        self._stop_signal = signum

    def _apply_control(self) -> None:
        """Apply a resize asked for through the control file (see ``launch.scale``)."""
        wanted = self.control.poll()
        if wanted is not None and wanted != len(self.fleet.rollout.actors):
            logger.info("control file: resizing the rollout fleet to %d", wanted)
            self.fleet.rollout.resize(wanted)

    def collect(self, step: int) -> Batch:
        """Prompts, generate, execute, reward: step ``step``'s scored groups, round by round as
        the sampling policy asks (``launch.loop.groups``). In async mode the producer thread
        runs this ahead of the learner."""
        before = self.curriculum.state_dict()
        groups, sampling_metrics = self.collector.collect(step, self.curriculum.next_indices)
        return Batch(
            step,
            groups,
            sampling_metrics,
            dict(self.collector.seconds),
            dict(self.collector.term_means),
            before,
            self.fleet.sandbox.stats(),
        )

    def _collect_beside_learner(self, step: int) -> Batch:
        """``collect`` with the learner narrowed to ``async.learner_threads_during_rollout``
        torch threads meanwhile: on shared CPU cores the engine and the learner then each have
        their own, and the learner takes them all back once the batch is in (rather than run
        on fewer threads for the whole step, or oversubscribe the cores while both compute)."""
        learner = self.fleet.learner
        learner.set_compute_threads(self.config.async_.learner_threads_during_rollout)
        try:
            return self.collect(step)
        finally:
            learner.set_compute_threads(0)

    def step(self, step: int) -> dict[str, float]:
        """One GRPO step, the recipe of the module docstring; returns the step's record."""
        start = time.perf_counter()
        with self._batches.paused():  # the producer is between batches: safe to resize
            self._apply_control()
        batch = self._batches.take(step)  # prompts, generate, execute, reward: collect(step)
        waited = time.perf_counter() - start
        self._observe(step, batch.groups)
        groups, staleness = self._fresh_groups(step, batch.groups)
        timer = StepTimer.after(batch.seconds)
        samples, advantages, advantage_metrics = self._advantages(step, groups)
        self.probe.choose(_completions(groups))  # once: the run's first completions
        timer.lap("train")  # preparing the samples counts as training
        pushed = self.train_and_push(samples, self.weight_version, self._batches.runs_ahead)
        self.weight_version = pushed.version
        timer.add(pushed.marks)
        record = self._step_record(
            step, batch, groups, pushed.metrics, staleness, advantage_metrics, timer
        )
        if self.rollouts is not None:
            self.rollouts.write(step, step_rows(step, groups, advantages, self.problems))
        record["time/batch_wait_s"] = waited
        record["time/step_s"] = time.perf_counter() - start
        return record

    def _observe(self, step: int, groups: list[Group]) -> None:
        """Log the batch's problems, feed the curriculum their pass rates, then let the producer
        draw the next batch's prompts (only now: a run draws the same whatever the timing)."""
        self._log_batch(step, [group.index for group in groups])
        for group in groups:
            self._feed_curriculum(group)
        self._batches.release()

    def _fresh_groups(self, step: int, groups: list[Group]) -> tuple[list[Group], dict[str, float]]:
        """The groups to train on, the others generated more than ``async.max_staleness``
        versions before the learner's weights (dropped, with a warning); and ``async/*``."""
        learner_version = self.weight_version
        max_staleness = self.config.async_.max_staleness
        kept, dropped = split_stale(groups, learner_version, max_staleness)
        if dropped:
            logger.warning(
                "step %d: dropped %d group(s) generated more than %d version(s) before the "
                "learner's %d",
                step,
                len(dropped),
                max_staleness,
                learner_version,
            )
        return kept, staleness_metrics(kept, dropped, learner_version)

    def _advantages(
        self, step: int, groups: list[Group]
    ) -> tuple[list[TrainSample], list[float | None], dict[str, float]]:
        """Advantages for every rewarded completion (``algorithm.advantage.step_advantages``):
        the samples to train on, each completion's advantage (None: not trained on), metrics."""
        completions = _completions(groups)
        rewards = [r for group in groups for r in group.rewards]
        algorithm, size = self.config.algorithm, self.config.rollout.group_size
        beta, kl = 0.0, None
        if kl_in_reward(algorithm.loss):
            beta, kl = self._sequence_kl(completions, rewards)
        advantages, metrics = step_advantages(
            rewards,
            [c.num_trained_tokens > 0 for c in completions],
            size,
            algorithm.advantage,
            step=step,
            seed=self.config.run.seed,
            keys=[group.index for group in groups],
            baseline=self.baseline,
            sequence_kl=kl,
            beta=beta,
        )
        samples = [
            TrainSample.of(c, advantage, i // size)
            for i, (c, advantage) in enumerate(zip(completions, advantages, strict=True))
            if advantage is not None
        ]
        return samples, advantages, metrics

    def _sequence_kl(
        self, completions: list[Completion], rewards: list[float | None]
    ) -> tuple[float, list[float | None]]:
        """The learner's current beta (``algorithm.loss.kl_control`` may move it) and the sequence
        KL of every rewarded completion with a token to train on (None for the others)."""
        kept = [
            i for i, r in enumerate(rewards) if r is not None and completions[i].num_trained_tokens
        ]
        probes = [TrainSample.of(completions[i]) for i in kept]
        beta, kl = self.fleet.learner.sequence_kl(probes) if probes else (0.0, [])
        per_completion: list[float | None] = [None] * len(rewards)
        for i, value in zip(kept, kl, strict=True):
            per_completion[i] = value
        return beta, per_completion

    def _step_record(
        self,
        step: int,
        batch: Batch,
        groups: list[Group],
        train_metrics: dict,
        staleness: dict[str, float],
        advantage_metrics: dict[str, float],
        timer: StepTimer,
    ) -> dict[str, float | None]:
        """The step's record (``docs/metrics.md``), over the groups trained on."""
        completions = _completions(groups)
        rewards = [r for group in groups for r in group.rewards]
        record = self._record(step, completions, rewards, train_metrics, batch.sandbox_stats, timer)
        judged = [r for g in groups for r in g.results if r.verdict is not Verdict.INFRA_ERROR]
        record["reward/pass_rate"] = sum(r.passed for r in judged) / len(judged) if judged else None
        record.update(staleness)
        if self.config.episode.max_turns > 1:  # over the groups trained on, as the records
            ends = [(c, r) for g in groups for c, r in zip(g.completions, g.results, strict=True)]
            record.update(episode_metrics(ends, self.config.episode.max_turns))
        record.update(batch.sampling_metrics)
        record.update(advantage_metrics)
        record.update(self.curriculum.stats())
        record.update(batch.term_means)
        if self.baseline is not None:
            record.update(self.baseline.stats())
        if self.colocation is not None:
            record.update(self.colocation.metrics())
        return record

    def _record(
        self, step, completions, rewards, train_metrics, sandbox_stats, timer: StepTimer
    ) -> dict[str, float | None]:
        """The step's metrics. A reward statistic over no reward is ``None`` (null in
        ``metrics.jsonl``): a step whose every sample was masked did not score 0."""
        scored = [r for r in rewards if r is not None]
        lengths = [c.num_trained_tokens for c in completions]
        generated_s = timer.marks["time/rollout_s"] + timer.marks.get("time/episode_s", 0.0)
        record: dict[str, float | None] = {
            "step": step,
            "weight_version": self.weight_version,
            "reward/mean": statistics.fmean(scored) if scored else None,
            "reward/std": statistics.pstdev(scored) if scored else None,
            "reward/masked_frac": 1 - len(scored) / max(len(rewards), 1),
            "train/zero_std_frac": zero_std_fraction(rewards, self.config.rollout.group_size),
            "rollout/response_len_mean": statistics.fmean(lengths) if lengths else 0.0,
            "rollout/tokens_per_s": sum(lengths) / max(generated_s, 1e-9),
        }
        record.update(train_metrics)
        record.update(sandbox_stats)
        record.update(self.fleet.rollout.counters)
        record.update(self.fleet.counters)
        record["rollout/num_actors"] = len(self.fleet.rollout.actors)
        record["rollout/live_actors"] = len(self.fleet.rollout.live())
        record.update(timer.marks)
        return record

    def _feed_curriculum(self, group: Group) -> None:
        """Feed the curriculum the group's pass rate (sandbox failures say nothing); a
        self-play group posed a prompt of its own, which says nothing about its problem."""
        if group.role != "solver":
            return
        judged = [r for r in group.results if r.verdict is not Verdict.INFRA_ERROR]
        if judged:
            self.curriculum.observe(group.index, sum(r.passed for r in judged) / len(judged))

    def evaluate(self) -> dict[str, float]:
        """pass@k on the held-out problems with the current weights (``eval/pass@k``)."""
        start = time.perf_counter()
        metrics = evaluate(
            self.eval_problems,
            self.tokenizer,
            self.fleet.rollout.generate,
            self.fleet.sandbox.execute,
            n=self.config.eval.n,
            ks=self.config.eval.k,
            seed=self.config.run.seed,
        )
        metrics["time/eval_s"] = time.perf_counter() - start
        return metrics

    def _log_batch(self, step: int, indices: list[int]) -> None:
        """Which problems each step trained on (what resume must reproduce)."""
        ids = [self.problems[i].problem_id for i in indices]
        append_jsonl(self.run_dir / "batches.jsonl", [{"step": step, "problem_ids": ids}])

    def save_checkpoint(self, step: int) -> None:
        """Learner and driver state after ``step``; in async mode the curriculum as it was
        before the batches collected ahead drew their prompts (they are redone on resume)."""
        with self._batches.paused():
            curriculum = self._batches.resume_state(step) or self.curriculum.state_dict()
        state = DriverState(
            step=step,
            weight_version=self.weight_version,
            seed=self.config.run.seed,
            curriculum=curriculum,
            baseline=self.baseline.state_dict() if self.baseline is not None else {},
        )
        path = save_checkpoint(self.run_dir, self.fleet.learner, state)
        logger.info("step %d: checkpoint saved to %s", step, path)


def _completions(groups: list[Group]) -> list[Completion]:
    return [c for group in groups for c in group.completions]
