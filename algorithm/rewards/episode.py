"""A multi-turn episode's reward (``episode.reward``): the last turn's, or discounted by the turn
that solved it, so an earlier success is worth more (``launch.loop.episodes`` runs the turns)."""

from __future__ import annotations

from common.config import EpisodeConfig


def discounted(
    reward: float | None, turns: int, solved: bool, episode: EpisodeConfig
) -> float | None:
    """The episode's reward under ``episode.reward``: with ``first_success_discounted`` a
    success at turn k is worth ``discount^(k-1)`` of one at the first; an unsolved episode
    keeps its last turn's reward (discounting it would make a late failure, or a negative
    term, cost less than an early one). None stays None: no verdict."""
    if reward is None or episode.reward == "final" or not solved:
        return reward
    return reward * episode.discount ** (turns - 1)
