"""Changing a running job from outside: ``python -m launch.scale RUN_DIR --rollout-actors N``.

The command writes ``<run>/control.json``; the driver polls it before every step and resizes the
rollout fleet (new actors receive the current weights before they serve). A file rather than an
RPC endpoint: it works the same for a local run, a ``ray job submit`` job on a shared file system,
and a human with an editor, and it survives a driver restart.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

CONTROL_FILE = "control.json"


class ControlFile:
    """Reads ``control.json`` when it changes; returns the requested rollout fleet size."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen: float | None = None

    def poll(self) -> int | None:
        try:
            mtime = self.path.stat().st_mtime
        except FileNotFoundError:
            return None
        if mtime == self._seen:
            return None
        self._seen = mtime
        try:
            wanted = json.loads(self.path.read_text()).get("rollout_actors")
        except (json.JSONDecodeError, AttributeError):
            print(f"warning: ignoring malformed {self.path}", file=sys.stderr)
            return None
        return int(wanted) if isinstance(wanted, int) and wanted >= 1 else None


def request_resize(run_dir: Path, rollout_actors: int) -> Path:
    """Atomically ask the run in ``run_dir`` to use ``rollout_actors`` rollout actors."""
    if rollout_actors < 1:
        raise ValueError(f"--rollout-actors must be at least 1, got {rollout_actors}")
    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir} is not a run directory")
    path = run_dir / CONTROL_FILE
    partial = path.with_suffix(".tmp")
    partial.write_text(json.dumps({"rollout_actors": rollout_actors}) + "\n")
    os.replace(partial, path)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m launch.scale", description="Resize the rollout fleet of a running job."
    )
    parser.add_argument("run_dir", type=Path, help="the run directory, e.g. runs/demo")
    parser.add_argument("--rollout-actors", type=int, required=True)
    args = parser.parse_args(argv)
    try:
        path = request_resize(args.run_dir, args.rollout_actors)
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"requested {args.rollout_actors} rollout actor(s) in {path}")
    return 0
