"""The commands users type answer ``--help`` (and so their own argument and config errors)
before loading torch, Ray or vLLM, which take seconds to import: a mistyped flag costs the user
half a second, not five. Moving an import to a module's top is how this regresses."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

#: Every ``python -m`` entry point of the docs whose job does not itself start with torch.
CLIS = [
    "launch.train",
    "launch.evaluate",
    "launch.selfplay.make_repairs",
    "launch.selfplay",
    "launch.verifier.train",
    "launch.scale",
    "launch.head",
    "bench.launch",
    "sandbox.check",
    "bench.sandbox",
    "common.memory.plan",
]
HEAVY = ("torch", "ray", "vllm", "transformers")

PROBE = """
import contextlib, io, runpy, sys
sys.argv = [{module!r}, "--help"]
with contextlib.redirect_stdout(io.StringIO()):
    try:
        runpy.run_module({module!r}, run_name="__main__")
    except SystemExit as stop:
        assert stop.code in (0, None), stop.code
print(",".join(sorted(name for name in {heavy!r} if name in sys.modules)))
"""


@pytest.mark.parametrize("module", CLIS)
def test_help_answers_without_heavy_imports(module):
    probe = PROBE.format(module=module, heavy=HEAVY)
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "", f"python -m {module} --help imported {done.stdout.strip()}"
