"""Steps in a row in which every group scored the same: said once, with what it means.

A group whose completions all got the same reward has advantage 0 and teaches nothing. A few
such steps are normal early on; ``FLAT_STEPS`` in a row mean the run is not learning and will
not start to by itself, so the driver warns once, from the step records alone
(``train/zero_std_frac``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

logger = logging.getLogger(__name__)

#: Steps in a row with every group flat before the run says so.
FLAT_STEPS = 10


def flat_meaning(reward: object) -> str:
    """What a run whose every group scores ``reward`` (the step's mean) is telling its user."""
    if reward == 0:
        return (
            "no completion earned any reward: the task may be out of the model's reach, or "
            "rollout.max_new_tokens / rollout.stop cut every program short; read a few "
            "completions in rollouts/ and their verdicts"
        )
    if reward == 1:
        return "every completion earned the full reward: there is nothing left to learn here"
    return (
        "every completion of a problem earned the same reward: raise rollout.temperature or "
        "rollout.group_size, or give the reward finer steps (reward.terms)"
    )


class FlatSteps:
    """Counts steps in a row whose groups were all flat; warns once per run."""

    def __init__(self, limit: int = FLAT_STEPS) -> None:
        self.limit = limit
        self.first: int | None = None  # the first step of the current flat streak
        self.warned = False

    def observe(self, record: Mapping[str, object]) -> str | None:
        """Note one step's record; the warning, the one time a streak reaches ``limit``."""
        step = int(record["step"])  # type: ignore[call-overload]
        if record.get("train/zero_std_frac") != 1.0:
            self.first = None
            return None
        self.first = step if self.first is None else self.first
        if self.warned or step - self.first + 1 < self.limit:
            return None
        self.warned = True
        reward = record.get("reward/mean")
        shown = "n/a" if reward is None else f"{reward:.3f}"
        message = (
            f"steps {self.first}-{step}: in every group all completions scored the same "
            f"(reward {shown}), so every advantage is 0 and the policy is not learning; "
            f"{flat_meaning(reward)}"
        )
        logger.warning("%s", message)
        return message
