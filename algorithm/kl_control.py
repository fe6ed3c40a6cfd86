"""The KL coefficient beta from step to step: fixed, adaptive, or a linear schedule.

- ``fixed``: ``learner.beta`` throughout (the GRPO paper).
- ``adaptive``: PPO's controller (Ziegler et al. 2019, "Fine-tuning language models from human
  preferences", section 2.2): after each train step, with the step's measured KL,
  ``e = clip(KL / kl_target - 1, -0.2, 0.2)`` and ``beta *= 1 + e * n / kl_horizon`` (n the
  step's samples), so beta grows while the policy drifts past the target and shrinks while it
  stays close. The KL here is the per-token mean of ``kl_estimator`` (``train/kl`` with the KL
  in the loss; from the sequence KLs with ``kl_in = "reward"``), so ``kl_target`` is per token.
- ``linear``: from ``beta`` at the first train step to ``beta_final`` at the last
  (``run.steps``), then ``beta_final``: a pull toward the reference that loosens (or tightens)
  as training goes, as in the users' DGRO script.

The current beta is ``train/beta`` in the step metrics and is saved in checkpoints, so a
resumed run continues with the beta it had.
"""

from __future__ import annotations

from typing import Literal

KlControlMode = Literal["fixed", "adaptive", "linear"]

#: PPO's bound on the proportional error: one step moves beta by at most 20% of n / horizon.
MAX_ERROR = 0.2


class KlControl:
    """Holds beta and moves it after every train step (see the module docstring)."""

    def __init__(
        self,
        mode: KlControlMode,
        beta: float,
        *,
        target: float = 0.01,
        horizon: int = 10_000,
        beta_final: float = 0.0,
        total_steps: int = 0,
    ) -> None:
        if mode == "linear" and total_steps < 1:
            raise ValueError("kl_control = 'linear' needs the run's length (run.steps)")
        self.mode, self.initial, self.beta = mode, beta, beta
        self.target, self.horizon = target, horizon
        self.beta_final, self.total_steps = beta_final, total_steps

    def update(self, kl: float, num_samples: int, steps_done: int) -> float:
        """Beta for the next train step, after ``steps_done`` steps; the last one measured
        ``kl`` (per token) over ``num_samples`` samples."""
        if self.mode == "adaptive":
            error = min(max(kl / self.target - 1.0, -MAX_ERROR), MAX_ERROR)
            self.beta *= 1.0 + error * num_samples / self.horizon
        elif self.mode == "linear":
            progress = min(1.0, steps_done / max(1, self.total_steps - 1))
            self.beta = self.initial + (self.beta_final - self.initial) * progress
        return self.beta
