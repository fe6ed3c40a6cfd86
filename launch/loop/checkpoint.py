"""Run checkpoints: the learner's state plus the driver's position in the run.

Layout of a run directory::

    checkpoints/step-0000006/   one complete checkpoint per saved step
    checkpoint -> checkpoints/step-0000006    the ``latest`` pointer (a symlink)

A checkpoint holds what the learner writes (the policy in Hugging Face format or the LoRA
adapter, its optimiser state) and ``driver_state.json``: every random stream of the driver is
derived from ``(run.seed, step)`` and that state, so a resumed run sees the prompts an
uninterrupted run would have seen. ``<run>/checkpoint`` loads like a model directory.

A save goes through these stages (:data:`SAVE_STAGES`, where a test can make it die):

1. the learner writes into ``step-N.partial/`` and fsyncs its files (``learner_written``);
2. the driver writes ``driver_state.json`` and fsyncs the whole directory (``state_written``);
3. ``step-N.partial`` is renamed ``step-N`` and ``checkpoints/`` fsynced: from here on the
   checkpoint is complete (``renamed``);
4. the pointer is switched (a new symlink renamed over the old one) and the run directory
   fsynced (``pointed``);
5. older checkpoints are renamed ``*.pruning`` (``pruning``) and deleted.

So a crash at any point leaves at least one complete checkpoint once one was saved, and resume
takes the newest complete one: the highest ``step-N`` holding ``driver_state.json`` (the
pointer can lag it by one crash; resume moves it). Leftovers (``*.partial``, ``*.pruning``)
are deleted by the next save.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from common.durable import exchange, fsync_dir, fsync_tree

if TYPE_CHECKING:
    from launch.fleet.clients import LearnerClient

DRIVER_STATE = "driver_state.json"
CHECKPOINTS = "checkpoints"
#: The pointer to the newest checkpoint, a symlink in the run directory.
LATEST = "checkpoint"
#: Complete checkpoints kept after a save: the newest only (a model's size each).
KEEP = 1
#: Where a save can be made to die (os._exit) for tests, in the order a save passes them.
SAVE_STAGES = ("learner_written", "state_written", "renamed", "pointed", "pruning")
#: Set to a stage name, the save ends the process there (exit status :data:`CRASH_STATUS`).
CRASH_ENV = "GRPO_CHECKPOINT_CRASH_AT"
CRASH_STATUS = 75
_STEP_DIR = re.compile(r"step-(\d+)")
_LEFTOVER_SUFFIXES = (".partial", ".pruning")


@dataclass
class DriverState:
    step: int
    weight_version: int
    seed: int
    curriculum: dict  # the prompt sampler's state: position and pass-rate history
    baseline: dict = field(default_factory=dict)  # the running per-problem reward baseline


@dataclass
class Checkpoint:
    """A complete checkpoint of a run: its directory and the driver state in it."""

    path: Path
    state: DriverState


def _reached(stage: str) -> None:
    """The fault hook: die here, as a kill would, when a test asked for this stage."""
    if os.environ.get(CRASH_ENV) == stage:
        os._exit(CRASH_STATUS)


def step_dir(run_dir: Path, step: int) -> Path:
    return run_dir / CHECKPOINTS / f"step-{step:07d}"


def save_checkpoint(
    run_dir: Path, learner: LearnerClient, state: DriverState, keep: int = KEEP
) -> Path:
    """Save learner and driver state as checkpoint ``state.step`` (stages in the module
    docstring), point ``<run>/checkpoint`` at it, keep the ``keep`` newest; returns its path."""
    if keep < 1:
        raise ValueError(f"keep ({keep}) must be at least 1: the new checkpoint is kept")
    root = run_dir / CHECKPOINTS
    root.mkdir(parents=True, exist_ok=True)
    _delete_leftovers(root)
    final = step_dir(run_dir, state.step)
    partial = final.with_name(final.name + ".partial")
    partial.mkdir()
    from launch.fleet.actors import gather_checkpoint  # lazy: Ray, not for `--help`

    written = learner.save_checkpoint(str(partial.resolve()))
    fetched = gather_checkpoint(partial.resolve(), written)  # ranks on other hosts' disks
    _reached("learner_written")
    (partial / DRIVER_STATE).write_text(json.dumps(asdict(state), indent=2) + "\n")
    fsync_tree(partial)  # the learner fsynced its files; this covers ours and the directories
    learner.discard(
        str(partial.resolve()), [i for i, w in enumerate(written) if w["node"] in fetched]
    )
    _reached("state_written")
    if not final.exists():
        partial.rename(final)
    elif exchange(partial, final):  # the same step saved again (a resumed run stopped at once)
        shutil.rmtree(partial)  # now the old one: incomplete by its name, never resumed
    else:  # no atomic swap here: a moment with neither name complete
        final.rename(final.with_name(final.name + ".pruning"))
        partial.rename(final)
    fsync_dir(root)
    _reached("renamed")
    _point_latest(run_dir, final)
    _reached("pointed")
    _prune(run_dir, final, keep)
    return final


def _point_latest(run_dir: Path, target: Path) -> None:
    """Switch the ``checkpoint`` symlink to ``target`` atomically (rename over the old link)."""
    link = run_dir / LATEST
    new = run_dir / f".{LATEST}.{uuid.uuid4().hex}.tmp"
    os.symlink(target.relative_to(run_dir), new)  # fails rather than follow an existing name
    os.replace(new, link)
    fsync_dir(run_dir)


def _prune(run_dir: Path, saved: Path, keep: int) -> None:
    """Delete all but the ``keep`` newest complete checkpoints (never ``saved``, the one the
    pointer names), each renamed first so a half-deleted one never looks complete."""
    root = run_dir / CHECKPOINTS
    old = [path for _, path in _complete(root)[:-keep] if path != saved]
    renamed = False
    for path in old:
        if path.is_dir() and not path.is_symlink():
            path.rename(root / f"{path.name}.{uuid.uuid4().hex[:8]}.pruning")
            renamed = True
    if renamed:
        fsync_dir(root)
    _reached("pruning")
    _delete_leftovers(root)


def _delete_leftovers(root: Path) -> None:
    """Partial saves and prunings a crash interrupted (never a complete checkpoint)."""
    for path in root.iterdir():
        if path.name.endswith(_LEFTOVER_SUFFIXES):
            shutil.rmtree(path, ignore_errors=True)


def _complete(root: Path) -> list[tuple[int, Path]]:
    """(step, directory) of every complete checkpoint under ``root``, oldest first."""
    if not root.is_dir():
        return []
    found = []
    for path in root.iterdir():
        match = _STEP_DIR.fullmatch(path.name)
        if match and (path / DRIVER_STATE).is_file():
            found.append((int(match.group(1)), path))
    return sorted(found)


def latest_checkpoint(run_dir: Path) -> Checkpoint:
    """The newest complete checkpoint of the run; ``FileNotFoundError`` when there is none.
    Reads only: see :func:`resume_checkpoint` for what resume also repairs."""
    complete = _complete(run_dir / CHECKPOINTS)
    if not complete:
        raise FileNotFoundError(
            f"{run_dir} has no complete checkpoint (no {CHECKPOINTS}/step-N/{DRIVER_STATE}):"
            " nothing to resume"
        )
    path = complete[-1][1]
    return Checkpoint(path, _read_state(path / DRIVER_STATE))


def _read_state(path: Path) -> DriverState:
    try:
        return DriverState(**json.loads(path.read_text()))
    except (json.JSONDecodeError, TypeError) as exc:
        # fsynced before its directory was renamed complete: only an edit or a disk fault
        raise FileNotFoundError(f"{path} is not a driver state ({exc}): cannot resume") from None


def resume_checkpoint(run_dir: Path) -> Checkpoint:
    """:func:`latest_checkpoint`, with the pointer moved to it when a crash came between a
    save's rename and its pointer switch (by the run's driver, which holds the run lock)."""
    found = latest_checkpoint(run_dir)
    link = run_dir / LATEST
    if not link.is_symlink() or link.resolve() != found.path.resolve():
        _point_latest(run_dir, found.path)
    return found


def load_driver_state(run_dir: Path) -> DriverState:
    """The driver state of the run's newest complete checkpoint."""
    return latest_checkpoint(run_dir).state


def clear_checkpoints(run_dir: Path) -> None:
    """Delete every checkpoint of the run (a run started again over it with ``--overwrite``):
    the new run's resume must never find the old run's steps."""
    link = run_dir / LATEST
    if link.is_symlink():
        link.unlink()
    for name in (CHECKPOINTS, LATEST):
        shutil.rmtree(run_dir / name, ignore_errors=True)
