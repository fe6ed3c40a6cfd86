"""Reward curve of a run, written as a PNG beside its metrics."""

from __future__ import annotations

import math
from pathlib import Path

from launch.loop.metrics import mean_present, read_metrics


def plot_rewards(metrics_path: str | Path, out_path: str | Path, window: int = 10) -> Path:
    """Plot ``reward/mean`` per step and its moving average; returns the PNG's path."""
    import matplotlib  # lazy: seconds to import, for the one plot at the end of a run

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_metrics(metrics_path)
    steps = [r["step"] for r in records]
    # A step without a reward (every sample masked: null) is a gap in the curve, not a 0.
    rewards = [r.get("reward/mean") for r in records]
    windows = [mean_present(rewards[max(0, i - window + 1) : i + 1]) for i in range(len(rewards))]
    smooth = [math.nan if mean is None else mean for mean in windows]  # NaN: a gap
    rewards = [math.nan if r is None else r for r in rewards]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, rewards, alpha=0.35, label="reward/mean")
    ax.plot(steps, smooth, label=f"moving average ({window} steps)")
    ax.set_xlabel("step")
    ax.set_ylabel("mean execution reward")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    out_path = Path(out_path)
    fig.savefig(out_path, dpi=100)
    plt.close(fig)
    return out_path
