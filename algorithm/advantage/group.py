"""Group-relative advantages, the zero-variance rule and KL-in-reward shaping (the rules are told
in ``algorithm``'s docstring).

In float64: with the KL charged in the reward and a group that all passes, the rewards are
1 - beta * KL_i, nearly equal, where float32 would lose precision on advantages of size 1. A
tied group's advantages are set to 0, not computed as 0 / (0 + eps), which rounding can leave
slightly off zero.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor

AdvantageScale = Literal["group_std", "batch_std", "none"]


def _grouped(rewards: Tensor, group_size: int) -> Tensor:
    if rewards.dim() != 1:
        raise ValueError(
            f"rewards must be 1-D (one per completion), got shape {tuple(rewards.shape)}"
        )
    if group_size < 1 or rewards.numel() % group_size:
        raise ValueError(
            f"number of rewards ({rewards.numel()}) must be a multiple of group_size "
            f"({group_size}): advantages are normalised within each group of completions"
        )
    return rewards.to(torch.float64).view(-1, group_size)  # (N/G, G)


def group_advantages(
    rewards: Tensor,  # (N,) grouped contiguously: completions [k*G, (k+1)*G) share a prompt
    group_size: int,
    eps: float = 1e-4,
    scale: AdvantageScale = "group_std",
    reward_scale: float = 1.0,
) -> Tensor:  # (N,) float64
    """Rewards centred on their group's mean, optionally scaled.

    ``scale``: "group_std" divides by the group's population std (GRPO), "batch_std" by the
    std of all rewards in the batch (more robust when groups are nearly uniform), "none" keeps
    the centred rewards (Dr. GRPO). ``reward_scale`` then multiplies every advantage (DGRO's
    coefficient, decoupled from beta): A = (r - mean) * reward_scale / (std + eps).
    Zero-variance groups get advantage exactly 0.
    """
    grouped = _grouped(rewards, group_size)  # (N/G, G)
    centred = grouped - grouped.mean(dim=1, keepdim=True)  # (N/G, G)
    if scale == "group_std":
        advantages = centred / (grouped.std(dim=1, unbiased=False, keepdim=True) + eps)
    elif scale == "batch_std":
        advantages = centred / (grouped.std(unbiased=False) + eps)
    elif scale == "none":
        advantages = centred
    else:
        raise ValueError(f"unknown advantage scale {scale!r}; use group_std, batch_std or none")
    uniform = grouped.amax(dim=1, keepdim=True) == grouped.amin(dim=1, keepdim=True)  # (N/G, 1)
    advantages = advantages * reward_scale
    return torch.where(uniform, torch.zeros_like(advantages), advantages).view(-1)


def masked_group_advantages(
    rewards: Sequence[float | None],
    group_size: int,
    eps: float,
    scale: AdvantageScale = "group_std",
) -> list[float | None]:
    """:func:`group_advantages` over the rewarded samples of each group; ``None`` rewards keep
    ``None`` advantages, and a group with fewer than two rewards gets ``None`` throughout.
    With ``batch_std`` the divisor is the std of every rewarded sample of the batch."""
    scored = [r for r in rewards if r is not None]
    batch_scale = statistics.pstdev(scored) + eps if len(scored) > 1 else 1.0
    advantages: list[float | None] = [None] * len(rewards)
    for start in range(0, len(rewards), group_size):
        kept = [i for i in range(start, start + group_size) if rewards[i] is not None]
        if len(kept) < 2:
            continue
        values = torch.tensor([rewards[i] for i in kept], dtype=torch.float64)
        group_scale: AdvantageScale = "none" if scale == "batch_std" else scale
        group = group_advantages(values, len(kept), eps=eps, scale=group_scale)
        if scale == "batch_std":
            group = group / batch_scale
        for i, advantage in zip(kept, group.tolist(), strict=True):
            advantages[i] = advantage
    return advantages


def is_informative(rewards: Sequence[float | None]) -> bool:
    """True when at least two scored completions of a group got different rewards; ``None``
    (no verdict) is left out, so a group with fewer than two scores is uninformative too."""
    return len({r for r in rewards if r is not None}) >= 2


def zero_std_fraction(rewards: Sequence[float | None], group_size: int) -> float:
    """Fraction of groups that teach nothing (not :func:`is_informative`)."""
    groups = [rewards[i : i + group_size] for i in range(0, len(rewards), group_size)]
    return sum(not is_informative(group) for group in groups) / max(len(groups), 1)


def kl_penalised_rewards(
    rewards: Tensor,  # (N,)
    kl: Tensor,  # (N,) per-sequence KL, e.g. from ``algorithm.loss.sequence_kl``
    beta: float,
) -> Tensor:  # (N,) float64
    """r_i - beta * KL_i: the KL-in-reward variant, applied before advantage normalisation.

    The penalty then competes with the task reward inside each group (a completion that drifted
    further from the reference ranks lower), instead of being a separate loss term.
    """
    if rewards.shape != kl.shape:
        raise ValueError(
            f"rewards {tuple(rewards.shape)} and kl {tuple(kl.shape)} must have the same shape: "
            "one KL per completion"
        )
    return rewards.to(torch.float64) - beta * kl.to(torch.float64)
