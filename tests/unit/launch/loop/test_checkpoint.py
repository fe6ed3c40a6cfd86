"""The run's checkpoint store: a save killed at each of its stages leaves the newest complete
checkpoint for resume to find; old checkpoints go only once a newer one is complete.

The kills are deterministic: the save runs in a subprocess whose environment names the stage
where it calls ``os._exit`` (``launch.loop.checkpoint.CRASH_ENV``), as a SIGKILL there would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from launch.loop.checkpoint import (
    CRASH_ENV,
    CRASH_STATUS,
    SAVE_STAGES,
    DriverState,
    latest_checkpoint,
    resume_checkpoint,
    save_checkpoint,
)
from tests.conftest import REPO_ROOT


class FileLearner:
    """Writes what the learner writes (weights, optimiser, state), tagged with its step: the
    store only moves directories, so real files of the right names are what it needs."""

    def __init__(self, step: int) -> None:
        self.step = step

    def save_checkpoint(self, path: str) -> list[dict]:
        out = Path(path)
        (out / "model.safetensors").write_bytes(f"weights of step {self.step}".encode())
        (out / "optimizer.pt").write_bytes(b"\0" * 256)
        (out / "learner_state.json").write_text(json.dumps({"step": self.step}))
        return [{"node": "", "files": []}]  # written on the driver's host: nothing to fetch

    def discard(self, path: str, ranks: list[int]) -> None:
        assert not ranks, "nothing was fetched from another host"


def _save(run_dir: Path, step: int, keep: int = 1) -> Path:
    state = DriverState(step=step, weight_version=step, seed=0, curriculum={"position": step})
    return save_checkpoint(run_dir, FileLearner(step), state, keep=keep)


def _save_killed_at(run_dir: Path, step: int, stage: str) -> None:
    """Save checkpoint ``step`` in a subprocess that dies at ``stage``."""
    code = textwrap.dedent(f"""
        from pathlib import Path
        from tests.unit.launch.loop.test_checkpoint import _save
        _save(Path({str(run_dir)!r}), {step})
    """)
    env = {**os.environ, CRASH_ENV: stage, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=env, check=False)
    assert done.returncode == CRASH_STATUS, f"the save did not stop at {stage}"


def _weights(path: Path) -> str:
    return (path / "model.safetensors").read_text()


def test_a_save_leaves_one_numbered_checkpoint_and_the_pointer_on_it(tmp_path):
    _save(tmp_path, 2)
    path = _save(tmp_path, 4)
    assert path == tmp_path / "checkpoints" / "step-0000004"
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step-0000004"]
    link = tmp_path / "checkpoint"
    assert link.is_symlink() and link.resolve() == path.resolve()
    assert _weights(link) == "weights of step 4"  # loads like a model directory
    assert latest_checkpoint(tmp_path).state.step == 4


@pytest.mark.parametrize("stage", SAVE_STAGES)
def test_a_save_killed_at_each_stage_resumes_from_the_newest_complete_checkpoint(tmp_path, stage):
    _save(tmp_path, 2)
    _save_killed_at(tmp_path, 4, stage)

    # Complete once renamed: before that the previous checkpoint is the newest complete one.
    expected = 4 if SAVE_STAGES.index(stage) >= SAVE_STAGES.index("renamed") else 2
    found = resume_checkpoint(tmp_path)
    assert found.state.step == expected
    assert found.state.curriculum == {"position": expected}
    assert _weights(found.path) == f"weights of step {expected}"
    # resume moved a lagging pointer to it
    assert (tmp_path / "checkpoint").resolve() == found.path.resolve()

    # the next save clears what the crash left and keeps the newest only
    _save(tmp_path, 6)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step-0000006"]
    assert resume_checkpoint(tmp_path).state.step == 6


def test_the_first_save_killed_before_it_completes_leaves_nothing_to_resume(tmp_path):
    _save_killed_at(tmp_path, 2, "state_written")
    with pytest.raises(FileNotFoundError, match=r"no complete checkpoint.*nothing to resume"):
        resume_checkpoint(tmp_path)


def test_keep_holds_the_newest_few(tmp_path):
    for step in (2, 4, 6):
        _save(tmp_path, step, keep=2)
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["step-0000004", "step-0000006"]
    with pytest.raises(ValueError, match="keep"):
        _save(tmp_path, 8, keep=0)


def test_a_checkpoint_without_its_driver_state_is_not_complete(tmp_path):
    _save(tmp_path, 2)
    (tmp_path / "checkpoints" / "step-0000009").mkdir()  # a copy cut short, say
    assert latest_checkpoint(tmp_path).state.step == 2


def test_a_new_run_over_an_old_one_never_resumes_its_checkpoints(tmp_path):
    from common.config import ConfigError, load_config
    from launch.train import prepare_run_dir

    config = load_config(REPO_ROOT / "configs" / "demo.toml", ["--run.output_dir", str(tmp_path)])
    _save(config.run_dir, 8)
    with pytest.raises(ConfigError, match="already holds a run"):
        prepare_run_dir(config, overwrite=False)
    prepare_run_dir(config, overwrite=True)
    with pytest.raises(FileNotFoundError):
        latest_checkpoint(config.run_dir)


def test_the_same_step_saved_again_replaces_it_in_one_swap(tmp_path):
    """A resumed run that stops at once saves its step again: the new files replace the old,
    through an atomic swap (``common.durable.exchange``), and nothing is left beside them."""
    first = _save(tmp_path, 3)
    (first / "marker").write_text("the first save")
    again = _save(tmp_path, 3)
    assert again == first and not (again / "marker").exists()
    assert [p.name for p in again.parent.iterdir()] == [again.name]
    assert resume_checkpoint(tmp_path).state.step == 3
