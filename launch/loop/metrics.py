"""Step metrics: one JSON object per step in ``metrics.jsonl`` and a live progress line.

Metric names are part of the interface (dashboards and tests read them), so they are written
exactly as the producers name them: ``reward/mean``, ``train/loss``, ``time/step_s``, ...
A value that was not measured (a reward mean over a step whose every sample was masked) is
``None``, written as JSON null: never 0, which would read as "measured, and zero".
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from common.durable import read_jsonl, repair_tail

#: The ETA is the median wall time of this many of the latest steps, times the steps left.
ETA_STEPS = 20
#: The run's last line sums up this many last steps.
SUMMARY_STEPS = 10


class MetricsLog:
    """Appends step records to ``metrics.jsonl``, flushed each step so a crash loses at most
    the line being written (its cut tail is dropped before the next run appends).

    The progress line's ETA counts from the steps' own times (:meth:`_eta`), whichever step
    this process starts after (``first_step``, a resumed run's checkpoint); ``clock`` is what
    measures them."""

    def __init__(
        self,
        path: str | Path,
        total_steps: int,
        stream: TextIO = sys.stdout,
        first_step: int = 0,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        repair_tail(self.path)
        self._file = self.path.open("a")
        self._stream = stream
        self._total = total_steps
        self._clock = clock
        self._last: tuple[int, float] | None = None  # the step and time of the last write
        self._step_s: deque[float] = deque(maxlen=ETA_STEPS)

    def write(self, record: dict[str, float | None]) -> None:
        clean = {k: _finite(v) for k, v in record.items()}
        self._file.write(json.dumps(clean) + "\n")
        self._file.flush()
        self._stream.write(self._progress_line(clean) + "\n")
        self._stream.flush()

    def _progress_line(self, record: dict) -> str:
        step = int(record.get("step", 0))
        filled = int(20 * step / max(self._total, 1))
        bar = "#" * filled + "." * (20 - filled)
        return (
            f"[{bar}] step {step:>4}/{self._total} | reward {_shown(record, 'reward/mean', '.3f')}"
            f" | pass {_shown(record, 'reward/pass_rate', '.2f', absent='n/a')}"
            f" | loss {_shown(record, 'train/loss', '+.4f')}"
            f" | kl {_shown(record, 'train/kl', '.4f')}"
            f" | |dlogp| {_shown(record, 'train/logprob_diff_mean', '.4f')}"
            f" | {_shown(record, 'time/step_s', '.2f')}s/step | eta {self._eta(step)}"
        )

    def _eta(self, step: int) -> str:
        """The time left: the median wall time between this process's writes over the latest
        steps, times the steps left. The time to this process's first step (the engines' and
        the learner's warm-up) is no step's: on the first step there is no estimate yet."""
        now = self._clock()
        if self._last is not None and step > self._last[0]:
            self._step_s.append((now - self._last[1]) / (step - self._last[0]))
        self._last = (step, now)
        if not self._step_s:
            return f"{'--':>5}"
        return f"{duration(statistics.median(self._step_s) * max(self._total - step, 0)):>5}"

    def close(self) -> None:
        self._file.close()


def _shown(record: dict, name: str, spec: str, absent: str | None = None) -> str:
    """``record[name]`` formatted by ``spec``; ``n/a`` when None; when absent, 0 or ``absent``."""
    if name not in record and absent is not None:
        return absent
    value = record.get(name, 0.0)
    return "n/a" if value is None else format(value, spec)


def duration(seconds: float) -> str:
    """``42s``, ``12m05s``, ``3h07m``."""
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


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


def summary(path: str | Path, last: int = SUMMARY_STEPS) -> str:
    """What a run did, from its ``metrics.jsonl``: ``300 steps, reward 0.93 and pass rate 0.88
    over the last 10 steps`` (the means of ``reward/mean`` and ``reward/pass_rate`` over the
    steps that measured them)."""
    records = read_metrics(path) if Path(path).exists() else []
    if not records:
        return "no step written"
    tail = records[-last:]
    reward = mean_present([r.get("reward/mean") for r in tail])
    passed = mean_present([r.get("reward/pass_rate") for r in tail])
    shown = ["n/a" if value is None else f"{value:.2f}" for value in (reward, passed)]
    over = "the last step" if len(tail) == 1 else f"the last {len(tail)} steps"
    steps = records[-1].get("step", len(records))
    plural = "" if steps == 1 else "s"
    return f"{steps} step{plural}, reward {shown[0]} and pass rate {shown[1]} over {over}"
