"""The KL coefficient beta from step to step: fixed, adaptive, or a linear schedule.

- ``fixed``: ``algorithm.loss.beta`` throughout (the GRPO paper).
- ``adaptive``: PPO's controller (Ziegler et al. 2019, section 2.2): after each train step, with
  the step's measured per-token KL, ``e = clip(KL / kl_target - 1, -0.2, 0.2)`` and
  ``beta *= 1 + e * n / kl_horizon`` (n the step's samples). The KL that steers is the one
  charged where beta is: the loss's with ``kl_in = "loss"``, the rewards' with ``kl_in =
  "reward"`` (:meth:`KlControl.steering_kl`).
- ``linear``: from ``beta`` at the first train step to ``beta_final`` at the last
  (``run.steps``), then ``beta_final``, as in the users' DGRO script.

The current beta is saved in checkpoints, so a resumed run continues with the beta it had.
"""

from __future__ import annotations

from common.config import LossConfig
from common.config.algorithm import KlControlMode

#: PPO's bound on the proportional error: one step moves beta by at most 20% of n / horizon.
MAX_ERROR = 0.2


def kl_in_reward(config: LossConfig) -> bool:
    """Whether each reward is charged its completion's KL before the advantages: ``kl_in =
    "reward"`` with a reference to measure it against (beta > 0)."""
    return config.beta > 0 and config.kl_in == "reward"


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
        kl_in: str = "loss",
    ) -> None:
        if mode == "linear" and total_steps < 1:
            raise ValueError("kl_control = 'linear' needs the run's length (run.steps)")
        self.mode, self.initial, self.beta = mode, beta, beta
        self.target, self.horizon = target, horizon
        self.beta_final, self.total_steps = beta_final, total_steps
        self.kl_in = kl_in

    @classmethod
    def of(cls, config: LossConfig, total_steps: int) -> KlControl:
        """The controller of ``[algorithm.loss]`` for a run of ``total_steps`` train steps."""
        return cls(
            config.kl_control,
            config.beta,
            target=config.kl_target,
            horizon=config.kl_horizon,
            beta_final=config.beta_final,
            total_steps=total_steps,
            kl_in=config.kl_in,
        )

    @property
    def loss_beta(self) -> float:
        """The KL weight inside the loss: 0 when the KL is charged in the reward instead."""
        return self.beta if self.kl_in == "loss" else 0.0

    def steering_kl(self, loss_kl: float | None, reward_kl: float | None) -> float:
        """The per-token KL the controller steers by after a step: the loss's where beta is a
        loss term, else the one the rewards were charged (0 where none was measured)."""
        return (loss_kl if self.kl_in == "loss" else reward_kl) or 0.0

    def update(self, kl: float, num_samples: int, steps_done: int) -> float:
        """Beta for the next train step, after ``steps_done`` steps; the last one measured
        ``kl`` (per token, :meth:`steering_kl`) over ``num_samples`` samples."""
        if self.mode == "adaptive":
            error = min(max(kl / self.target - 1.0, -MAX_ERROR), MAX_ERROR)
            self.beta *= 1.0 + error * num_samples / self.horizon
        elif self.mode == "linear":
            progress = min(1.0, steps_done / max(1, self.total_steps - 1))
            self.beta = self.initial + (self.beta_final - self.initial) * progress
        return self.beta
