"""A record of every rollout: what the model wrote, what the sandbox said, what it was worth.

With ``run.save_rollouts`` (on by default) every completion of every trained step becomes one
JSON row in ``<run>/rollouts/``:

    step, weight_version, problem_id, role (solver; saboteur or fixer with
    ``selfplay.saboteur``, whose prompt and problem id are the ones they were posed), group
    (its position in the step), sample (its index in the group), prompt, completion (the
    decode of the sampled tokens; a multi-turn episode's whole transcript, feedback
    included), program (what the sandbox ran: the last turn's), finish_reason, num_tokens
    (the model's, feedback excluded), turns,
    verdict, tests_passed, tests_total, test_verdicts (one per test run), detail, reward
    (None: no verdict, masked), terms ({reward term: value}), advantage (None: not trained on),
    source_task_id (the problem a derived task, such as a repair task, was made from; None for
    an original one), step_rows (how many rows the step wrote: the reader's check that the
    step is whole)

Rows go to ``rollouts-<sequence>-step<first step>.jsonl``; when a file grows past
``run.rollouts_file_mib`` it is gzipped (``.jsonl.gz``) and the next step opens the next file in
sequence, and the oldest files are deleted while all of them together exceed
``run.rollouts_max_mib``. A resumed run opens a new file that starts with a marker row
(``{"resumed_after": <checkpoint step>}``), which :func:`read_rollouts` honours. It is what the
verifier tools read, and what a user loads::

    import pandas as pd
    from launch.loop.rollouts import read_rollouts
    frame = pd.DataFrame(read_rollouts("runs/demo/rollouts"))
    frame.groupby("step").reward.mean()      # == metrics.jsonl's reward/mean
"""

from __future__ import annotations

import gzip
import json
import shutil
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from common.durable import parse_jsonl
from common.types import Problem

PREFIX = "rollouts-"


class RolloutWriter:
    """Appends each trained step's rows (module docstring) with rotation and a size cap."""

    def __init__(
        self,
        directory: Path,
        file_mib: float = 64,
        max_mib: float = 1024,
        resumed_after: int | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.file_bytes, self.max_bytes = int(file_mib * (1 << 20)), int(max_mib * (1 << 20))
        self._path: Path | None = None  # the open file; None: the next step starts one
        self._marker = None if resumed_after is None else {"resumed_after": resumed_after}

    def write(self, step: int, rows: Iterable[dict[str, Any]]) -> None:
        """Appends one whole step: every row carries the step's row count (``step_rows``)."""
        rows = list(rows)
        if self._path is None:
            self._path = self._fresh(step)
        with self._path.open("a") as handle:
            if self._marker is not None:
                handle.write(json.dumps(self._marker) + "\n")
                self._marker = None
            for row in rows:
                handle.write(json.dumps({**row, "step_rows": len(rows)}) + "\n")
        if self._path.stat().st_size > self.file_bytes:
            _gzip(self._path)
            self._path = None
        self._cap()

    def _fresh(self, step: int) -> Path:
        """The next file in sequence, for rows from ``step`` on (never one written before)."""
        files = rollout_files(self.directory)
        sequence = _sequence(files[-1]) + 1 if files else 1
        return self.directory / f"{PREFIX}{sequence:06d}-step{step:07d}.jsonl"

    def _cap(self) -> None:
        files = rollout_files(self.directory)
        total = sum(f.stat().st_size for f in files)
        for old in files[:-1]:  # never the newest
            if total <= self.max_bytes:
                break
            total -= old.stat().st_size
            old.unlink()


def _gzip(path: Path) -> None:
    with path.open("rb") as source, gzip.open(f"{path}.gz", "wb", compresslevel=6) as target:
        shutil.copyfileobj(source, target)
    path.unlink()


def rollout_files(directory: str | Path) -> list[Path]:
    """The record files of ``directory`` in the order they were written."""
    files = [p for p in Path(directory).glob(f"{PREFIX}*-step*.jsonl*")]
    return sorted(files, key=_sequence)


def _sequence(path: Path) -> int:
    return int(path.name[len(PREFIX) :].split("-", 1)[0])


def read_rollouts(paths: str | Path | Sequence[str | Path]) -> Iterator[dict[str, Any]]:
    """Every row of rollout directories and files, one run (directory) after another, each in
    step order. Within a run (a directory, or files given from one directory, taken in the
    order written): after a resume marker, earlier files' steps beyond it are forgotten, and a
    step written more than once comes from the latest file that has it. Across runs nothing is
    matched: two runs' step 3 are both kept. A step with fewer rows than its ``step_rows`` (cut
    short by a crash the run was never resumed from) is dropped, not marked: a part of a step
    is not a sample of it; rows written before ``step_rows`` existed are kept as they are.
    A malformed line other than a file's cut last one raises ``ValueError`` naming it."""
    runs: dict[Path, dict[Path, None]] = {}  # run directory -> its files (an ordered set)
    for path in [paths] if isinstance(paths, (str, Path)) else paths:
        path = Path(path)
        files = rollout_files(path) if path.is_dir() else [path]
        runs.setdefault(path if path.is_dir() else path.parent, {}).update(dict.fromkeys(files))
    for run_files in runs.values():
        by_step = _steps_of_run(sorted(run_files, key=_order))
        for step in sorted(by_step):
            if _whole(by_step[step]):
                yield from by_step[step]


def _order(path: Path) -> tuple[int, str]:
    """A run's files in the order written; a file not named by the writer goes last."""
    try:
        return _sequence(path), path.name
    except ValueError:
        return 1 << 62, path.name


def _steps_of_run(files: Sequence[Path]) -> dict[int, list[dict[str, Any]]]:
    """One run's rows by step: resume markers honoured, each step from the latest file."""
    by_step: dict[int, list[dict[str, Any]]] = {}
    for file in files:
        in_file: dict[int, list[dict[str, Any]]] = {}
        for row in _rows(file):
            if "resumed_after" in row:
                by_step = {s: r for s, r in by_step.items() if s <= row["resumed_after"]}
            else:
                in_file.setdefault(row["step"], []).append(row)
        by_step.update(in_file)
    return by_step


def _whole(rows: list[dict[str, Any]]) -> bool:
    """Whether a step's rows are all it wrote (rows without ``step_rows`` cannot say: kept)."""
    expected = rows[0].get("step_rows")
    return expected is None or len(rows) >= expected


def _rows(file: Path) -> list[dict[str, Any]]:
    """A file's rows; a last line cut by a crash (or a gzip stream cut short) ends it."""
    opener = gzip.open if file.name.endswith(".gz") else open
    with opener(file, "rb") as handle:
        try:
            data = handle.read()
        except EOFError:  # a gzip file cut short: what was flushed is lost with it
            return []
    return parse_jsonl(data, file)[0]


def step_rows(
    step: int, groups: Sequence[Any], advantages: Sequence[float | None], problems: list[Problem]
) -> Iterator[dict[str, Any]]:
    """The rows of one step: ``groups`` (``launch.loop.groups.Group``) as trained, ``advantages``
    aligned with their completions."""
    position = 0
    for g, group in enumerate(groups):
        problem = group.posed or problems[group.index]
        for k, completion in enumerate(group.completions):
            result = group.results[k]
            yield {
                "step": step,
                "weight_version": completion.weight_version,
                "problem_id": problem.problem_id,
                "role": group.role,
                "group": g,
                "sample": completion.sample_index,
                "prompt": problem.prompt,
                "completion": completion.text,
                "program": group.programs[k] if group.programs else None,
                "finish_reason": completion.finish_reason,
                "num_tokens": completion.num_trained_tokens,
                "turns": completion.turns,
                "verdict": result.verdict.value,
                "tests_passed": result.tests_passed,
                "tests_total": result.tests_total,
                "test_verdicts": [v.value for v in result.test_verdicts],
                "detail": result.detail,
                "reward": group.rewards[k],
                "terms": {name: values[k] for name, values in group.terms.items()},
                "advantage": advantages[position],
                "source_task_id": problem.source_task_id or None,
            }
            position += 1
