"""Steps with nothing to train on: counted, and after ``run.max_masked_steps`` in a row, the end.

A step in which no completion it sampled got a reward (sandbox infra errors, or reward terms
returning ``None``) trains nothing. One such step is noise; several in a row mean the sandbox
pool (or a reward term) is broken, and every further step would burn prompts and time. So the
driver stops the run with one line saying which steps, why and what to check, after a
checkpoint from which ``--resume`` continues once the cause is fixed. Read from the step's metric
record alone (``reward/scored_completions``), so it is tested without a fleet.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

logger = logging.getLogger(__name__)

#: Completions of the step, every sampling round, that got a reward (``launch.loop.groups``).
SCORED = "reward/scored_completions"
#: Fraction of the step's sandbox executions that were infra errors (``sandbox.trusted.pool``).
INFRA = "sandbox/verdict/infra_error"


class MaskedStepsError(RuntimeError):
    """``run.max_masked_steps`` steps in a row had nothing to train on; the message says which
    steps, the likely cause, and how to continue."""


def is_masked(record: Mapping[str, object]) -> bool:
    """True when no completion sampled in the step got a reward (so it trained on nothing)."""
    return record.get(SCORED) == 0


def masked_cause(record: Mapping[str, object]) -> str:
    """Why a masked step had no reward, from its record, with what to check."""
    infra = record.get(INFRA)
    if isinstance(infra, (int, float)) and infra >= 1.0:
        return (
            "every completion was a sandbox infra error; is the sandbox pool healthy? "
            "`python -m sandbox.check` runs it alone, and the sandbox actor's log says why its "
            "workers failed"
        )
    share = f"{infra:.0%}" if isinstance(infra, (int, float)) else "none"
    return (
        f"no completion got a reward: {share} of the sandbox's executions were infra errors, "
        "and the reward terms (reward.terms) returned None for the rest"
    )


class MaskedStepLimit:
    """Counts masked steps in a row; ``limit`` 0 never stops."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.streak: list[int] = []  # the masked steps in a row, up to the last step seen

    def observe(self, record: Mapping[str, object]) -> str | None:
        """Note one step's record; when it ends ``limit`` masked steps in a row, the reason to
        stop (one line, without what happens to the run: the driver adds that)."""
        if not is_masked(record):
            self.streak = []
            return None
        self.streak.append(int(record["step"]))  # type: ignore[call-overload]
        logger.warning(
            "step %d trained on nothing (%s); %d such step(s) in a row%s",
            self.streak[-1],
            masked_cause(record),
            len(self.streak),
            f" of run.max_masked_steps = {self.limit}" if self.limit else "",
        )
        if not self.limit or len(self.streak) < self.limit:
            return None
        first, last = self.streak[0], self.streak[-1]
        steps = f"step {first}" if first == last else f"steps {first}-{last}"
        return (
            f"{steps} had no sample to train on, run.max_masked_steps ({self.limit}) in a row: "
            f"{masked_cause(record)}"
        )
