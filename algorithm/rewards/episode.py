"""A multi-turn episode's reward (``episode.reward``): the last turn's, or discounted by the turn
that solved it, so an earlier success is worth more (``launch.loop.episodes`` runs the turns).

With ``first_success_discounted`` (gamma = ``episode.discount``, T = ``episode.max_turns``) a
success at turn k earns its reward times gamma^(k-1), and an unsolved episode its last turn's
reward times gamma^(T-1), whatever turn it stopped at. So a near miss never outranks a success:
an unsolved program's partial credit p < 1 gives p * gamma^(T-1) < gamma^(T-1) <= gamma^(k-1).
This holds for any composition of terms in which an unsolved program earns less than a solved
one and a success earns at least 0.
"""

from __future__ import annotations

from collections.abc import Sequence

from common.config import EpisodeConfig


def discounted(
    reward: float | None, turns: int, solved: bool, episode: EpisodeConfig
) -> float | None:
    """The episode's reward under ``episode.reward`` (the module docstring); None stays None."""
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
