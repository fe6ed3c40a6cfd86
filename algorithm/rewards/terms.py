"""Reward terms and their weighted composition (docs/rewards.md).

The contract, one rule for every term: a term is called with a batch of :class:`RewardInput` and
returns one ``float | None`` per completion, in order. ``None`` means *masked*: this term cannot
judge the sample, so the sample must leave the loss; it never means 0, which would tell the
policy the completion was bad. Batches, so a learned scorer runs one forward pass per batch.

Composition: ``reward = sum_k weight_k * term_k``, ``None`` if any term is ``None``. Every term's
values are kept for logging, so a term that dominates or never varies is visible.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from common.config.algorithm import (
    ExecutionOptions,
    LengthOptions,
    RewardConfig,
    builtin_kind,
    term_options,
)
from common.config.user_terms import RewardTermError, load_user_term
from common.prompts import continues_prefix, entry_point_from_tests, extract_code, is_code
from common.types import ExecutionResult, Problem, Verdict


@dataclass(frozen=True)
class RewardInput:
    """Everything a term may judge one completion by."""

    problem: Problem
    completion: str  # the model's text, as sampled
    program: str  # the candidate program built from it (what the sandbox ran)
    result: ExecutionResult  # the sandbox's judgement of ``program``
    num_tokens: int  # completion tokens


class RewardTerm(Protocol):
    def __call__(self, batch: list[RewardInput]) -> list[float | None]: ...


def execution_reward(result: ExecutionResult, mode: str) -> float | None:
    """``binary``: 1.0 iff every test passed. ``partial``: the fraction of tests passed.
    ``infra_error`` is ``None`` (masked): a crashed sandbox says nothing about the code."""
    if result.verdict is Verdict.INFRA_ERROR:
        return None
    if mode == "binary":
        return 1.0 if result.verdict is Verdict.PASSED else 0.0
    if mode == "partial":
        if result.verdict is Verdict.PASSED:
            return 1.0
        return result.tests_passed / result.tests_total if result.tests_total else 0.0
    raise ValueError(f"unknown reward mode {mode!r}: expected 'binary' or 'partial'")


@dataclass(frozen=True)
class ExecutionTerm:
    """The sandbox's verdict as a reward (option ``mode``: binary or partial credit)."""

    mode: str

    def __call__(self, batch: list[RewardInput]) -> list[float | None]:
        return [execution_reward(item.result, self.mode) for item in batch]


def has_code(item: RewardInput) -> bool:
    """Whether the completion holds code the project can run, whatever it computes.

    A completion that continues the problem's program prefix (the synthetic task, plain
    HumanEval) is judged by the program it completes; otherwise by the code ``extract_code``
    finds, which falls back to the raw text when nothing parses.
    """
    if not item.completion.strip():
        return False
    if continues_prefix(item.problem):
        return is_code(item.program)
    return is_code(extract_code(item.completion, entry_point_from_tests(item.problem.tests)))


def format_term(batch: list[RewardInput]) -> list[float | None]:
    """1.0 when the completion contains extractable code, else 0.0: a dense early signal."""
    return [1.0 if has_code(item) else 0.0 for item in batch]


def length_penalty(num_tokens: int, max_len: int, cache_len: int) -> float:
    """DAPO's soft overlong punishment: 0 up to ``max_len - cache_len`` tokens, then linear
    down to -1 at ``max_len``, -1 beyond. With ``cache_len`` 0 it is a hard cut at ``max_len``.
    """
    start = max_len - cache_len
    if num_tokens <= start:
        return 0.0
    if num_tokens > max_len:
        return -1.0
    return (start - num_tokens) / cache_len


@dataclass(frozen=True)
class LengthTerm:
    """Penalises completions that run into the generation limit, softly (DAPO)."""

    max_len: int
    cache_len: int

    def __call__(self, batch: list[RewardInput]) -> list[float | None]:
        return [length_penalty(item.num_tokens, self.max_len, self.cache_len) for item in batch]


@dataclass(frozen=True)
class WeightedTerm:
    name: str
    weight: float
    term: RewardTerm


@dataclass
class ScoredBatch:
    """Composed rewards plus every term's own values (for logging), all one per completion."""

    rewards: list[float | None]
    by_term: dict[str, list[float | None]]


def _checked(name: str, values: Any, size: int) -> list[float | None]:
    """A term's output held to the contract: one finite float or ``None`` per completion."""
    values = list(values)
    if len(values) != size:
        raise RewardTermError(
            f"reward term {name!r} returned {len(values)} values for a batch of {size}: "
            "it must return one per completion"
        )
    out: list[float | None] = []
    for i, value in enumerate(values):
        if value is None:
            out.append(None)
            continue
        if not isinstance(value, numbers.Real) or not math.isfinite(value):
            raise RewardTermError(
                f"reward term {name!r} returned {value!r} for completion {i}: expected a "
                "finite float, or None to mask the sample"
            )
        out.append(float(value))
    return out


class ComposedReward:
    """``sum_k weight_k * term_k`` per completion; ``None`` from any term masks the sample."""

    def __init__(self, terms: list[WeightedTerm]) -> None:
        if not terms:
            raise ValueError("a composed reward needs at least one term")
        self.terms = terms

    def __call__(self, batch: list[RewardInput]) -> ScoredBatch:
        by_term = {t.name: _checked(t.name, t.term(batch), len(batch)) for t in self.terms}
        rewards: list[float | None] = []
        for i in range(len(batch)):
            total: float | None = 0.0
            for t in self.terms:
                value = by_term[t.name][i]
                if value is None:
                    total = None
                    break
                total += t.weight * value
            rewards.append(total)
        return ScoredBatch(rewards, by_term)


def term_metrics(by_term: Mapping[str, list[float | None]]) -> dict[str, float | None]:
    """``reward/<term>/mean`` over the term's non-``None`` values (``None`` when it has none: a
    mean over nothing is not 0), and its masked fraction."""
    metrics: dict[str, float | None] = {}
    for name, values in by_term.items():
        scored = [v for v in values if v is not None]
        metrics[f"reward/{name}/mean"] = sum(scored) / len(scored) if scored else None
        metrics[f"reward/{name}/masked_frac"] = 1 - len(scored) / max(len(values), 1)
    return metrics


def build_reward(
    config: RewardConfig,
    max_new_tokens: int,
    scorers: Mapping[str, RewardTerm] | None = None,
) -> ComposedReward:
    """The configured composition. ``scorers`` maps each scorer term's name to a callable term
    (``ScorerTerm`` around its actor); the other terms are built here."""
    scorers = scorers or {}
    terms = []
    for name, term_config in config.terms.items():
        kind = builtin_kind(name, term_config)
        options = term_options(name, term_config)
        if kind is None:
            term = load_user_term(name, term_config.function, term_config.options)
        elif kind == "execution":
            assert isinstance(options, ExecutionOptions)
            term = ExecutionTerm(options.mode)
        elif kind == "format":
            term = format_term
        elif kind == "length":
            assert isinstance(options, LengthOptions)
            max_len = options.max_len or max_new_tokens
            term = LengthTerm(max_len, options.cache_len or max_len // 4)
        elif name in scorers:
            term = scorers[name]
        else:
            raise RewardTermError(
                f"reward term {name!r} needs its scorer actor: start it with "
                "launch.fleet.actors.start_scorers(config, run_id) and pass it to the collector"
            )
        terms.append(WeightedTerm(name, term_config.weight, term))
    return ComposedReward(terms)
