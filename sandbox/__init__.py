"""Hardened execution of untrusted code, split along its trust boundary (docs/sandbox.md).

- ``trusted/``: the pool's front, in the caller's process; only it knows a test's expected
  values.
- ``isolated/``: what runs in each worker's processes (server, zygote, the child's harness and
  the isolation layers); it imports the standard library, itself and ``wire/`` only.
- ``wire/``: what both sides exchange.
- Here: the tools (``python -m sandbox.check``, ``python -m sandbox.verify_problem``), the
  problem files they read, and ``sandbox.reward.execution_reward``.

Nothing is imported here: the isolated side's processes import this package first.
"""
