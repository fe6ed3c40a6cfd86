"""Run checkpoints: the learner's state plus the driver's position in the run.

Layout of ``<run>/checkpoint/``: the policy in Hugging Face format (or the LoRA adapter),
``optimizer.pt`` and ``learner_state.json`` written by the learner, and ``driver_state.json``
(step, weight version, the curriculum's state: sampler position and pass-rate history). Every
random stream of the driver (prompt order, sampling seeds) is derived from ``(run.seed, step)``
and that state, so a resumed run sees the prompts an uninterrupted run would have seen.

A checkpoint is written to ``checkpoint.tmp`` and renamed over the old one only when complete,
so a crash while saving never leaves a run without a usable checkpoint.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from launch.clients import LearnerClient

DRIVER_STATE = "driver_state.json"


@dataclass
class DriverState:
    step: int
    weight_version: int
    seed: int
    curriculum: dict  # the prompt sampler's state: position and pass-rate history
    baseline: dict = field(default_factory=dict)  # the running per-problem reward baseline


def save_checkpoint(run_dir: Path, learner: LearnerClient, state: DriverState) -> Path:
    """Save learner and driver state atomically; returns the checkpoint directory."""
    final = run_dir / "checkpoint"
    partial = run_dir / "checkpoint.tmp"
    shutil.rmtree(partial, ignore_errors=True)
    learner.save_checkpoint(str(partial.resolve()))
    (partial / DRIVER_STATE).write_text(json.dumps(asdict(state), indent=2) + "\n")
    backup = run_dir / "checkpoint.old"
    shutil.rmtree(backup, ignore_errors=True)
    if final.exists():
        final.rename(backup)
    partial.rename(final)
    shutil.rmtree(backup, ignore_errors=True)
    return final


def load_driver_state(run_dir: Path) -> DriverState:
    """The driver state of the run's last complete checkpoint."""
    path = run_dir / "checkpoint" / DRIVER_STATE
    if not path.is_file():
        raise FileNotFoundError(
            f"{run_dir} has no complete checkpoint ({path} is missing): nothing to resume"
        )
    return DriverState(**json.loads(path.read_text()))
