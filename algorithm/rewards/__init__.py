"""Composable rewards: the term contract, built-in and user-defined terms, their weighted sum
(``terms``), process rewards' step splitting (``steps``), a multi-turn episode's discounted
reward (``episode``), the self-play saboteur's reward (``selfplay``), and the reward config (the
baselines themselves are in ``algorithm.advantage``). See docs/rewards.md."""

from algorithm.rewards.episode import discounted, episode_rewards
from algorithm.rewards.selfplay import bug_hardness, saboteur_rewards
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
    "bug_hardness",
    "build_reward",
    "discounted",
    "episode_rewards",
    "execution_reward",
    "format_term",
    "length_penalty",
    "load_user_term",
    "saboteur_rewards",
    "split_steps",
    "step_prefixes",
    "term_metrics",
]
