"""Attacks of issue 48 that only root can stage: paths that appear on the host, at ``/`` and in
the system's directories, after the pool started (an answers file a dataset tool leaves at
``/``). The rest of the attack suite, which any user can stage, is in
``tests/unit/sandbox/pool/test_attacks.py`` and runs as root and as an ordinary user.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from common.types import Verdict
from sandbox.trusted.pool import SandboxPool
from tests.unit.sandbox.helpers import CONFIG, run

ANSWERS = "def f(x):\n    return x + 1\n"
PROBE = """
import os

def _readable(path):
    try:
        if os.path.isdir(path):
            os.listdir(path)
        else:
            open(path).read()
    except OSError:
        return False
    return True

def visible():
    return [path for path in PATHS if os.path.lexists(path) or _readable(path)]
"""


def test_paths_created_after_the_pool_started_are_not_visible(tmp_path: Path) -> None:
    """A file and a directory at ``/``, a file in ``/etc`` and one in ``/dev/shm``, made by
    root after the pool started, world-readable: the program finds none of them (on 7a049f7
    the view hid only the top-level directories that existed when the worker started, so
    the file and the directory at ``/`` and the file in ``/etc`` were readable)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create paths at / (the ordinary user's suite is sandbox/pool)")
    tag = f"grpo-answers-{os.getpid()}"
    directory = Path("/") / tag
    files = [Path("/") / f"{tag}.py", directory / "answers.py", Path("/etc") / f"{tag}.py"]
    if Path("/dev/shm").is_dir():
        files.append(Path("/dev/shm") / f"{tag}.py")
    paths = [str(directory), *map(str, files)]
    config = CONFIG.model_copy(update={"num_workers": 1, "timeout_s": 10.0, "test_timeout_s": 5.0})
    with SandboxPool(config) as pool:
        try:
            directory.mkdir(mode=0o755)
            for path in files:
                path.write_text(ANSWERS)
                path.chmod(0o644)
            result = run(pool, f"PATHS = {paths!r}\n" + PROBE, tests=("assert visible() == []",))
        finally:
            for path in files:
                path.unlink(missing_ok=True)
            shutil.rmtree(directory, ignore_errors=True)
    assert result.verdict is Verdict.PASSED, result.detail
