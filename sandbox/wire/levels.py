"""The isolation levels a worker reports in its ``ready`` message, strongest first. The pool's
is the weakest of its workers', a metric (``LEVEL_NUMBER``), and the pool refuses to run below
``sandbox.min_isolation`` (``LEVEL_NAMED``). docs/sandbox.md says what each stops."""

from __future__ import annotations

LEVEL_FULL = "namespaces(user,net,pid,mount,ipc)+view+locked+seccomp+rlimits"
LEVEL_NAMESPACES = "namespaces(user,net,pid)+rlimits"
LEVEL_RLIMITS = "rlimits-only"
LEVEL_NUMBER = {LEVEL_FULL: 2.0, LEVEL_NAMESPACES: 1.0, LEVEL_RLIMITS: 0.0}
LEVEL_NAMED = {"full": LEVEL_FULL, "namespaces": LEVEL_NAMESPACES, "rlimits": LEVEL_RLIMITS}
