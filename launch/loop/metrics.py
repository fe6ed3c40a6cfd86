"""Step metrics: one JSON object per step in ``metrics.jsonl`` and a live progress line.

Metric names are part of the interface (dashboards and tests read them), so they are written
exactly as the producers name them: ``reward/mean``, ``train/loss``, ``time/step_s``, ...
A value that was not measured (a reward mean over a step whose every sample was masked) is
``None``, written as JSON null: never 0, which would read as "measured, and zero".
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import TextIO

from common.durable import read_jsonl, repair_tail


class MetricsLog:
    """Appends step records to ``metrics.jsonl``, flushed each step so a crash loses at most
    the line being written (its cut tail is dropped before the next run appends)."""

    def __init__(
        self,
        path: str | Path,
        total_steps: int,
        stream: TextIO = sys.stdout,
        first_step: int = 0,
    ) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        repair_tail(self.path)
        self._file = self.path.open("a")
        self._stream = stream
        self._total = total_steps
        self._first = first_step
        self._start = time.perf_counter()

    def write(self, record: dict[str, float | None]) -> None:
        clean = {k: _finite(v) for k, v in record.items()}
        self._file.write(json.dumps(clean) + "\n")
        self._file.flush()
        self._stream.write(self._progress_line(clean) + "\n")
        self._stream.flush()

    def _progress_line(self, record: dict) -> str:
        step = int(record.get("step", 0))
        elapsed = time.perf_counter() - self._start
        remaining = elapsed / max(step - self._first, 1) * (self._total - step)
        filled = int(20 * step / max(self._total, 1))
        bar = "#" * filled + "." * (20 - filled)
        return (
            f"[{bar}] step {step:>4}/{self._total} | reward {_shown(record, 'reward/mean', '.3f')}"
            f" | loss {_shown(record, 'train/loss', '+.4f')}"
            f" | kl {_shown(record, 'train/kl', '.4f')}"
            f" | |dlogp| {_shown(record, 'train/logprob_diff_mean', '.4f')}"
            f" | {_shown(record, 'time/step_s', '.2f')}s/step | eta {remaining:4.0f}s"
        )

    def close(self) -> None:
        self._file.close()


def _shown(record: dict, name: str, spec: str) -> str:
    """``record[name]`` formatted by ``spec``; 0 when absent (as before), ``n/a`` when None."""
    value = record.get(name, 0.0)
    return "n/a" if value is None else format(value, spec)


def _finite(value: float | None) -> float | None:
    """JSON has no NaN/inf; write null so a broken metric is visible rather than a parse error."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def mean_present(values: list[float | None]) -> float | None:
    """The mean of the values that were measured (a step whose every sample was masked has no
    reward mean); None when none was."""
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def read_metrics(path: str | Path) -> list[dict]:
    """All step records of a run, in order; a last line cut by a crash is left out."""
    return read_jsonl(path)
