"""Which problems to train on next, given how the policy has been doing on each.

GRPO learns nothing from a group whose completions all pass or all fail, so the useful problems
are those the policy *sometimes* solves. Each policy tracks a per-problem pass rate (an EMA of
the groups' pass fractions) and draws ``count`` distinct problems per call:

- ``uniform``: exactly :class:`launch.data.problems.PromptSampler` (the pass rates unused);
- ``failure_focused``: weights ``floor + 4 p (1 - p)``, 1 for a problem solved half the time and
  ``floor`` (above zero: the policy changes) for one always or never solved; unseen ones get 1;
- ``easy_to_hard``: a pool of the easiest problems (by pass rate, else a prior: shorter reference
  solutions are easier) growing from ``start_fraction`` of the set to all of it over
  ``ramp_draws`` draws, drawn uniformly.

Every draw uses a generator seeded by (seed, policy, draw number) and the state is plain data, so
a resumed run draws exactly what an uninterrupted one would have.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from common.types import Problem
from launch.data.problems import PromptSampler

CURRICULA = ("uniform", "failure_focused", "easy_to_hard")


class Curriculum:
    """Base: pass-rate tracking and checkpointable state; subclasses choose the problems."""

    policy = "base"

    def __init__(self, num_problems: int, seed: int, ema: float = 0.3) -> None:
        if num_problems < 1:
            raise ValueError("a curriculum needs at least one problem")
        if not 0 < ema <= 1:
            raise ValueError(f"ema ({ema}) must be in (0, 1]: the weight of the newest result")
        self.num_problems = num_problems
        self.seed = seed
        self.ema = ema
        self.draws = 0
        self.pass_rate: list[float | None] = [None] * num_problems
        self.attempts = [0] * num_problems

    def next_indices(self, count: int) -> list[int]:
        """The next ``count`` problem indices (distinct when ``count`` <= the problem count)."""
        indices = self._choose(count, random.Random(f"{self.seed}/{self.policy}/{self.draws}"))
        self.draws += 1
        return indices

    def _choose(self, count: int, rng: random.Random) -> list[int]:
        raise NotImplementedError

    def observe(self, index: int, pass_fraction: float) -> None:
        """Record a group's result on problem ``index``: the fraction of its samples that passed."""
        if not 0.0 <= pass_fraction <= 1.0:
            raise ValueError(f"pass fraction {pass_fraction} is outside [0, 1]")
        old = self.pass_rate[index]
        new = pass_fraction if old is None else (1 - self.ema) * old + self.ema * pass_fraction
        self.pass_rate[index] = new
        self.attempts[index] += 1

    def stats(self) -> dict[str, float]:
        """Where the set stands: how much of it is seen, solved, never solved, learnable."""
        seen = [p for p in self.pass_rate if p is not None]
        total = self.num_problems
        return {
            "curriculum/seen_frac": len(seen) / total,
            "curriculum/solved_frac": sum(p >= 1.0 - 1e-9 for p in seen) / total,
            "curriculum/unsolved_frac": sum(p <= 1e-9 for p in seen) / total,
            "curriculum/learnable_frac": sum(1e-9 < p < 1.0 - 1e-9 for p in seen) / total,
        }

    def state_dict(self) -> dict:
        """Plain, JSON-serialisable state (floats round-trip exactly through JSON)."""
        return {
            "policy": self.policy,
            "num_problems": self.num_problems,
            "seed": self.seed,
            "draws": self.draws,
            "pass_rate": list(self.pass_rate),
            "attempts": list(self.attempts),
        }

    def load_state_dict(self, state: dict) -> None:
        if state["policy"] != self.policy or state["num_problems"] != self.num_problems:
            raise ValueError(
                f"checkpoint curriculum is {state['policy']!r} over {state['num_problems']} "
                f"problems; this run has {self.policy!r} over {self.num_problems}"
            )
        self.seed = state["seed"]
        self.draws = state["draws"]
        self.pass_rate = list(state["pass_rate"])
        self.attempts = list(state["attempts"])


class UniformCurriculum(Curriculum):
    """Epoch-wise permutations: exactly :class:`PromptSampler`, whose position is the state."""

    policy = "uniform"

    def __init__(self, num_problems: int, seed: int, ema: float = 0.3) -> None:
        super().__init__(num_problems, seed, ema)
        self.sampler = PromptSampler(num_problems, seed)

    def _choose(self, count: int, rng: random.Random) -> list[int]:
        return self.sampler.next_indices(count)

    def state_dict(self) -> dict:
        return {**super().state_dict(), "position": self.sampler.position}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.sampler = PromptSampler(self.num_problems, self.seed, position=state["position"])


class FailureFocusedCurriculum(Curriculum):
    """Prefers problems solved some of the time: weight ``floor + 4 p (1 - p)``."""

    policy = "failure_focused"

    def __init__(self, num_problems: int, seed: int, ema: float = 0.3, floor: float = 0.05):
        super().__init__(num_problems, seed, ema)
        if floor <= 0:
            raise ValueError("floor must be > 0: a problem never drawn can never be re-measured")
        self.floor = floor

    def weight(self, index: int) -> float:
        rate = self.pass_rate[index]
        return 1.0 if rate is None else self.floor + 4.0 * rate * (1.0 - rate)

    def _choose(self, count: int, rng: random.Random) -> list[int]:
        weights = [self.weight(i) for i in range(self.num_problems)]
        return weighted_sample(weights, count, rng)


class EasyToHardCurriculum(Curriculum):
    """A pool of the easiest problems that grows to the whole set over ``ramp_draws`` draws."""

    policy = "easy_to_hard"

    def __init__(
        self,
        num_problems: int,
        seed: int,
        ema: float = 0.3,
        difficulty: Sequence[float] | None = None,
        start_fraction: float = 0.25,
        ramp_draws: int = 100,
    ) -> None:
        super().__init__(num_problems, seed, ema)
        if difficulty is not None and len(difficulty) != num_problems:
            raise ValueError(f"{len(difficulty)} difficulty values for {num_problems} problems")
        if not 0 < start_fraction <= 1 or ramp_draws < 1:
            raise ValueError("start_fraction must be in (0, 1] and ramp_draws at least 1")
        self.prior = list(difficulty) if difficulty is not None else [0.0] * num_problems
        self.start_fraction = start_fraction
        self.ramp_draws = ramp_draws

    def pool_size(self, count: int) -> int:
        progress = min(1.0, self.draws / self.ramp_draws)
        fraction = self.start_fraction + (1.0 - self.start_fraction) * progress
        return min(self.num_problems, max(count, round(fraction * self.num_problems)))

    def _choose(self, count: int, rng: random.Random) -> list[int]:
        # Observed problems rank by pass rate (easy first); unseen ones by their prior, placed
        # as if their pass rate were 0.5 so they neither crowd out nor wait behind known ones.
        def easiness(i: int) -> tuple[float, float, int]:
            rate = self.pass_rate[i]
            return (-(0.5 if rate is None else rate), self.prior[i], i)

        order = sorted(range(self.num_problems), key=easiness)
        pool = order[: self.pool_size(count)]
        if count <= len(pool):
            return rng.sample(pool, count)
        return [pool[rng.randrange(len(pool))] for _ in range(count)]


def weighted_sample(weights: Sequence[float], count: int, rng: random.Random) -> list[int]:
    """``count`` distinct indices drawn with probability proportional to weight, without
    replacement (Efraimidis-Spirakis keys ``u ** (1 / w)``); with replacement beyond the set.
    """
    if count > len(weights):
        return rng.choices(range(len(weights)), weights=weights, k=count)
    keys = [(rng.random() ** (1.0 / w), i) for i, w in enumerate(weights)]
    return [i for _, i in sorted(keys, reverse=True)[:count]]


def prior_difficulty(problems: Sequence[Problem]) -> list[float]:
    """A difficulty guess before any result: the reference solution's length (else the
    prompt's), since longer solutions are harder to write in one go."""
    return [float(len(p.reference_solution or p.prompt)) for p in problems]


def make_curriculum(
    policy: str,
    problems: Sequence[Problem],
    seed: int,
    ema: float = 0.3,
    ramp_draws: int = 100,
) -> Curriculum:
    """The curriculum named by ``data.curriculum`` over ``problems``."""
    if policy == "uniform":
        return UniformCurriculum(len(problems), seed, ema)
    if policy == "failure_focused":
        return FailureFocusedCurriculum(len(problems), seed, ema)
    if policy == "easy_to_hard":
        return EasyToHardCurriculum(
            len(problems), seed, ema, prior_difficulty(problems), ramp_draws=ramp_draws
        )
    raise ValueError(f"curriculum {policy!r} is not one of {', '.join(CURRICULA)}")
