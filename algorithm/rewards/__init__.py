"""Composable rewards: the term contract, built-in and user-defined terms, their weighted sum
(``terms``), process rewards' step splitting (``steps``), a multi-turn episode's discounted
reward (``episode``), the self-play saboteur's reward (``selfplay``), and the reward config (the
baselines themselves are in ``algorithm.advantage``). See docs/rewards.md."""

from algorithm.rewards.episode import discounted, episode_rewards
from algorithm.rewards.steps import aggregate_steps, split_steps, step_prefixes
from algorithm.rewards.terms import (
    ComposedReward,
    RewardInput,
    RewardTermError,
    WeightedTerm,
    build_reward,
    execution_reward,
    format_term,
    length_penalty,
    load_user_term,
    term_metrics,
)
from common.config import RewardConfig, RewardTermConfig, ScorerOptions

__all__ = [
    "ComposedReward",
    "RewardConfig",
    "RewardInput",
    "RewardTermConfig",
    "RewardTermError",
    "ScorerOptions",
    "WeightedTerm",
    "aggregate_steps",
    "build_reward",
    "discounted",
    "episode_rewards",
    "execution_reward",
    "format_term",
    "length_penalty",
    "load_user_term",
    "split_steps",
    "step_prefixes",
    "term_metrics",
]
