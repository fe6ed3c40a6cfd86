"""Where an episode's discount applies (``algorithm/rewards/episode.py``; the discount itself is
tested with the episodes, tests/unit/launch/loop/test_episodes.py)."""

from __future__ import annotations

from algorithm.rewards.episode import episode_rewards
from common.config import EpisodeConfig


def test_a_multi_turn_run_discounts_every_episode_by_its_turns():
    episode = EpisodeConfig(reward="first_success_discounted", discount=0.5, max_turns=3)
    ends = [(1, True), (2, True), (3, False), (1, False)]
    # successes at turns 1 and 2: 1 and 0.5; unsolved ones as if they ran 3 turns: x 0.25
    assert episode_rewards([1.0, 1.0, 0.5, None], ends, episode) == [1.0, 0.5, 0.125, None]


def test_single_turn_rewards_are_kept_as_they_are():
    episode = EpisodeConfig(reward="first_success_discounted", discount=0.5, max_turns=1)
    assert episode_rewards([0.25, None], [(1, False), (1, False)], episode) == [0.25, None]
