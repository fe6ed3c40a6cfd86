"""Execution reward: a verdict becomes a scalar, or ``None`` when the pool itself broke.

The function lives with the other reward terms in ``algorithm.rewards`` (the algorithm package
imports no role, so the reward cannot live here); it is re-exported here, where the sandbox's
callers look for it. ``algorithm.rewards`` imports without torch.
"""

from __future__ import annotations

from algorithm.rewards.terms import execution_reward

__all__ = ["execution_reward"]
