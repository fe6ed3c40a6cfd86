"""A multi-turn episode's reward (``episode.reward``): the last turn's, or discounted by the turn
that solved it, so an earlier success is worth more (``launch.loop.episodes`` runs the turns).

With ``first_success_discounted`` (gamma = ``episode.discount``, T = ``episode.max_turns``) a
success at turn k earns its reward times gamma^(k-1), and an unsolved episode earns its last
turn's reward times gamma^(T-1), whatever turn it stopped at: it is discounted as if it had run
to the last turn. So a near miss never outranks a success, even one at the last turn: with the
execution term a success earns 1 and an unsolved episode its partial credit p < 1, so
p * gamma^(T-1) < gamma^(T-1) <= gamma^(k-1). Every unsolved episode gets the same factor, so a
late failure (or a negative term) costs no less than an early one. The ordering holds for any
composition of terms in which an unsolved program earns less than a solved one and a success
earns at least 0.
"""

from __future__ import annotations

from collections.abc import Sequence

from common.config import EpisodeConfig


def discounted(
    reward: float | None, turns: int, solved: bool, episode: EpisodeConfig
) -> float | None:
    """The episode's reward under ``episode.reward``: with ``first_success_discounted`` a
    success at turn k is worth ``discount^(k-1)`` of one at the first, and an unsolved
    episode ``discount^(max_turns-1)`` of its last turn's reward (the module docstring says
    why). None stays None: no verdict."""
    if reward is None or episode.reward == "final":
        return reward
    if not solved:
        return reward * episode.discount ** (episode.max_turns - 1)
    return reward * episode.discount ** (turns - 1)


def episode_rewards(
    rewards: Sequence[float | None], ends: Sequence[tuple[int, bool]], episode: EpisodeConfig
) -> list[float | None]:
    """Every sample's reward as its episode earns it, ``ends`` each one's (turns, solved):
    :func:`discounted` in a multi-turn run, the reward as it is when every episode is one
    turn."""
    if episode.max_turns == 1:
        return list(rewards)
    return [
        discounted(reward, turns, solved, episode)
        for reward, (turns, solved) in zip(rewards, ends, strict=True)
    ]
