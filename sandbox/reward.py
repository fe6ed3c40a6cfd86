"""Execution reward: a verdict becomes a scalar, or ``None`` when the pool itself broke.
It lives with the other reward terms in ``algorithm.rewards`` (which imports no role) and is
re-exported here, where the sandbox's callers look for it."""

from __future__ import annotations

from algorithm.rewards.terms import execution_reward

__all__ = ["execution_reward"]
