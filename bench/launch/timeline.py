"""A timeline model of one GRPO step: synchronous vs one-step-off-policy asynchronous.

Pure functions over measured per-phase times, so the benchmark can say what the same phases
would cost on a placement the measuring machine does not have: rollout engines and the learner
on *separate* devices, ``N`` identical rollout engines and one learner.

Inputs (seconds, as measured for one step of the whole batch by one engine, see
``bench.launch``):

- ``rollout``: generating the step's completions on one engine (``time/rollout_s``);
- ``reward``: executing them in the sandbox pool (``time/reward_s``);
- ``train``: the learner's step (``time/train_s``);
- ``sync``: exporting and loading the new weights (``time/weight_sync_s``).

Model, step by step:

``gen = rollout / N``
    The batch is split evenly across ``N`` engines that run in parallel (ideal scaling: no
    engine is slower than another, per-engine throughput does not depend on its share).

``reward_exposed``
    Without overlap, the sandbox starts when generation ends: ``reward_exposed = reward``.
    With overlap (completions are executed as they stream out of the engines), everything but
    the last group's executions can hide behind generation, as far as generation lasts:
    ``reward_exposed = max(reward / groups, reward - gen)``.

Synchronous step (every completion on-policy; the phases run one after the other)::

    T_sync = gen + reward_exposed + train + sync

One-step-off-policy asynchronous step (steady state): the engines generate batch ``k+1`` with
the weights of step ``k-1`` while the learner trains on batch ``k``; the weight push is a
barrier that both sides wait for (the learner exports, the engines load), so it is paid once
per step on the critical path of both::

    T_async = max(gen + reward_exposed, train) + sync

``speedup = T_sync / T_async`` (>= 1; at most 2 when ``gen + reward_exposed == train`` and
``sync`` is small). Staleness is one version for every completion.

What it leaves out: start-up and the first (pipeline-filling) step, per-engine imbalance,
dynamic sampling's extra rounds, and contention: on the 2-core benchmark machine rollout and
learning share the same cores, so the measured phase times are *not* those of separate devices;
the model tells what the measured phases would give if each role had its own device.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class PhaseTimes:
    """Measured seconds of one step's phases (whole batch, one rollout engine)."""

    rollout: float
    reward: float
    train: float
    sync: float

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if value < 0:
                raise ValueError(f"{name} time must be >= 0, got {value}")


@dataclass(frozen=True)
class Prediction:
    num_engines: int
    generation_s: float
    reward_exposed_s: float
    sync_step_s: float
    async_step_s: float

    @property
    def speedup(self) -> float:
        return self.sync_step_s / self.async_step_s if self.async_step_s > 0 else 1.0

    def as_dict(self) -> dict[str, float]:
        out = asdict(self)
        out["speedup"] = self.speedup
        return out


def generation_time(phases: PhaseTimes, num_engines: int) -> float:
    """``rollout / N``: the batch split evenly over ``N`` engines running in parallel."""
    if num_engines < 1:
        raise ValueError(f"num_engines must be >= 1, got {num_engines}")
    return phases.rollout / num_engines


def exposed_reward(phases: PhaseTimes, gen: float, overlap: bool, groups: int) -> float:
    """Reward time left on the critical path after generation (see the module docstring)."""
    if not overlap:
        return phases.reward
    if groups < 1:
        raise ValueError(f"groups must be >= 1, got {groups}")
    return max(phases.reward / groups, phases.reward - gen)


def sync_step(phases: PhaseTimes, num_engines: int = 1, overlap: bool = False, groups: int = 1):
    """``T_sync = rollout/N + reward_exposed + train + sync``."""
    gen = generation_time(phases, num_engines)
    return gen + exposed_reward(phases, gen, overlap, groups) + phases.train + phases.sync


def async_step(phases: PhaseTimes, num_engines: int = 1, overlap: bool = False, groups: int = 1):
    """``T_async = max(rollout/N + reward_exposed, train) + sync`` (one step off-policy)."""
    gen = generation_time(phases, num_engines)
    return max(gen + exposed_reward(phases, gen, overlap, groups), phases.train) + phases.sync


def predict(
    phases: PhaseTimes, num_engines: int = 1, overlap: bool = False, groups: int = 1
) -> Prediction:
    """Synchronous and asynchronous step times for ``num_engines`` engines and one learner."""
    gen = generation_time(phases, num_engines)
    return Prediction(
        num_engines=num_engines,
        generation_s=gen,
        reward_exposed_s=exposed_reward(phases, gen, overlap, groups),
        sync_step_s=sync_step(phases, num_engines, overlap, groups),
        async_step_s=async_step(phases, num_engines, overlap, groups),
    )


def predict_table(
    phases: PhaseTimes,
    engines: tuple[int, ...] = (1, 2, 4, 8),
    overlap: bool = False,
    groups: int = 1,
) -> list[Prediction]:
    return [predict(phases, n, overlap, groups) for n in engines]


def format_predictions(predictions: list[Prediction], batch_size: int) -> str:
    """A plain-text table: step times and samples/s, sync vs async, per engine count."""
    lines = [
        f"{'engines':>7} {'gen s':>8} {'reward s':>9} {'sync step s':>12} "
        f"{'async step s':>13} {'speed-up':>9} {'sync samp/s':>12} {'async samp/s':>13}"
    ]
    for p in predictions:
        lines.append(
            f"{p.num_engines:>7} {p.generation_s:>8.2f} {p.reward_exposed_s:>9.3f} "
            f"{p.sync_step_s:>12.2f} {p.async_step_s:>13.2f} {p.speedup:>8.2f}x "
            f"{batch_size / p.sync_step_s:>12.1f} {batch_size / p.async_step_s:>13.1f}"
        )
    return "\n".join(lines)
