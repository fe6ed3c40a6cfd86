"""The AMX tile permission (``actor/amx.py``): asked for by every process that imports the
engine's worker extension, harmless on CPUs without AMX.

Each check runs in a new interpreter: the permission belongs to a process and survives
``fork``, so only a freshly exec'd process starts without it, as an engine's worker does. On a
CPU without AMX (``amx_tile`` absent from ``/proc/cpuinfo``) the checks show the request is
harmless; on one with AMX they show it is granted, which is what vLLM's CPU attention needs
(without it, its first tile instruction is killed with SIGILL).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from actor.amx import cpu_has_amx_tiles
from tests.conftest import REPO_ROOT


def _run(code: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_new_process_holds_amx_tiles_after_the_request_exactly_when_the_cpu_has_them():
    seen = _run(
        "import json\n"
        "from actor.amx import amx_tiles_permitted, request_amx_tiles\n"
        "before = amx_tiles_permitted()\n"
        "granted = request_amx_tiles()\n"
        "print(json.dumps([before, granted, amx_tiles_permitted()]))\n"
    )
    has_amx = cpu_has_amx_tiles()
    assert seen == [False, has_amx, has_amx]  # exec starts without it: every process must ask


def test_importing_the_worker_extension_asks_for_amx_tiles():
    """What vLLM does in each engine worker process. The request is counted by a wrapper that
    calls through, so the check holds on a CPU without AMX too; with AMX the process must hold
    the permission afterwards."""
    seen = _run(
        "import json\n"
        "import actor.amx\n"
        "calls = []\n"
        "request = actor.amx.request_amx_tiles\n"
        "actor.amx.request_amx_tiles = lambda: calls.append(request()) or calls[-1]\n"
        "import actor.worker_extension\n"
        "print(json.dumps([calls, actor.amx.amx_tiles_permitted()]))\n"
    )
    has_amx = cpu_has_amx_tiles()
    assert seen == [[has_amx], has_amx]
