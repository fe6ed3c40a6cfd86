"""Hardened execution of untrusted code: ``sandbox.pool.SandboxPool`` and
``sandbox.reward.execution_reward``. See docs/sandbox.md for the design."""
