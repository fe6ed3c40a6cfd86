"""Hardened execution of untrusted code, split along its trust boundary.

- ``sandbox/trusted/``: the pool's front, in the caller's process: ``SandboxPool``
  (``trusted/pool.py``), test plans, judging, the result cache, the handles on the worker
  processes and the build of the zygote's C loop. Only it knows a test's expected values.
- ``sandbox/isolated/``: what runs in each worker's processes, started by the front as
  ``python -I``: the server, the zygote and its C loop, the child's harness, the namespaces,
  limits, seccomp filter, process reaping and scratch cleaning. It imports the standard library,
  itself and ``sandbox/wire/`` only (``tests/unit/sandbox/test_boundary.py``).
- ``sandbox/wire/``: what both sides exchange: frames, canonical values, isolation levels.
- Here: the tools (``python -m sandbox.check``, ``python -m sandbox.bench``,
  ``python -m sandbox.verify_problem``), the problem files they read, and
  ``sandbox.reward.execution_reward``.

Nothing is imported here: the isolated side's processes import this package first.
See docs/sandbox.md for the design.
"""
