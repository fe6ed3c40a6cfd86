"""One GPU for an engine and a learner rank (``rollout.colocate``): who holds the card when.

Each engine shares its placement-group bundle with one learner rank, and a synchronous step
takes turns:

1. the engines generate the batch (the learner's optimiser state waits in host memory with
   ``learner.offload_optimizer = "while_generating"``);
2. the engines sleep (``rollout.sleep_level``: 1 frees the KV cache, 2 the weights too);
3. the learner reloads its optimiser state, trains and exports, and offloads the state again;
4. the push wakes every engine around its load (``RolloutFleet.start_push``).

Steps 2 and 3 are :meth:`Colocation.before_train`, the offload :meth:`Colocation.after_train`.
On CPU hosts the same calls run in the same order (vLLM-CPU's sleep frees nothing), so the
``colocate/*`` times measure the choreography's own cost.
"""

from __future__ import annotations

from common.config import Config
from launch.fleet.fleet import Fleet


class Colocation:
    """The colocated step's turns (see the module docstring)."""

    def __init__(self, config: Config, fleet: Fleet) -> None:
        self.fleet = fleet
        self.level = config.rollout.sleep_level
        self.offloads = config.learner.offload_optimizer == "while_generating"
        self._marks: dict[str, float] = {}

    @classmethod
    def of(cls, config: Config, fleet: Fleet) -> Colocation | None:
        """The run's colocation, or None when its engines have GPUs (or cores) of their own."""
        return cls(config, fleet) if config.rollout.colocate else None

    def before_train(self) -> None:
        """The engines asleep, then the learner's optimiser state back on its device."""
        self._marks = {"colocate/sleep_s": self.fleet.rollout.sleep(self.level)}
        if self.offloads:
            self._marks["colocate/reload_s"] = self.fleet.learner.reload_optimizer()

    def after_train(self) -> None:
        """The learner's optimiser state to host memory (which also hands its device memory
        back), or else the step's cached blocks handed back, before the push wakes the engines
        (call it once the step's metrics are in: the learner is done)."""
        if self.offloads:
            self._marks["colocate/offload_s"] = self.fleet.learner.offload_optimizer()
        else:
            self._marks["colocate/release_s"] = self.fleet.learner.release_memory()

    def metrics(self) -> dict[str, float]:
        """This step's ``colocate/*`` (after the push: it woke the engines)."""
        marks, self._marks = self._marks, {}
        if marks:
            marks["colocate/wake_s"] = self.fleet.rollout.wake_s
        rollout = self.fleet.rollout
        counts = {"colocate/sleeps": rollout.sleeps, "colocate/wakes": rollout.wakes}
        return {**marks, **{name: float(count) for name, count in counts.items()}}
