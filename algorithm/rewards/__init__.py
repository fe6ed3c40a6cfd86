"""Composable rewards: the term contract, built-in and user-defined terms, their weighted sum
(``terms``), process rewards' step splitting (``steps``), a multi-turn episode's discounted
reward (``episode``), and the reward config (the baselines themselves are in
``algorithm.advantage``). See docs/rewards.md."""

from algorithm.rewards.episode import discounted
from algorithm.rewards.steps import aggregate_steps, split_steps, step_prefixes
from algorithm.rewards.terms import (
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
from common.config import (
    ExecutionOptions,
    LengthOptions,
    RewardConfig,
    RewardTermConfig,
    ScorerOptions,
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
    "WeightedTerm",
    "aggregate_steps",
    "build_reward",
    "discounted",
    "execution_reward",
    "format_term",
    "length_penalty",
    "load_user_term",
    "split_steps",
    "step_prefixes",
    "term_metrics",
]
