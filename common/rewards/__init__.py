"""Composable rewards: the term contract, built-in and user-defined terms, their weighted sum,
and the baseline options (the baselines themselves are in ``launch.advantage``). See
docs/rewards.md."""

from common.rewards.config import (
    ExecutionOptions,
    LengthOptions,
    RewardConfig,
    RewardTermConfig,
    ScorerOptions,
)
from common.rewards.scorer import ScorerTerm, build_tiny_scorer, resolve_scorer_path
from common.rewards.steps import aggregate_steps, split_steps, step_prefixes
from common.rewards.terms import (
    ComposedReward,
    RewardInput,
    RewardTerm,
    RewardTermError,
    ScoredBatch,
    WeightedTerm,
    build_reward,
    execution_reward,
    format_term,
    length_penalty,
    load_user_term,
    term_metrics,
)

__all__ = [
    "ComposedReward",
    "ExecutionOptions",
    "LengthOptions",
    "RewardConfig",
    "RewardInput",
    "RewardTerm",
    "RewardTermConfig",
    "RewardTermError",
    "ScoredBatch",
    "ScorerOptions",
    "ScorerTerm",
    "WeightedTerm",
    "aggregate_steps",
    "build_reward",
    "build_tiny_scorer",
    "execution_reward",
    "format_term",
    "length_penalty",
    "load_user_term",
    "resolve_scorer_path",
    "split_steps",
    "step_prefixes",
    "term_metrics",
]
