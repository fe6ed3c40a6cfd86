"""How long one weight push takes, per bucket size: ``python -m launch.bench_push``.

Builds the benchmark model of ``configs/bench.toml`` (or takes ``--model``), starts one vLLM
engine (its core in this process, or in its own with ``--engine-process separate``) and one
learner in this process (no Ray: this isolates the transport from actor calls),
and for each ``--bucket-mib`` pushes ``--pushes`` perturbed versions of the weights, printing
the median export time (learner: state dict to safetensors buckets) and load time (engine:
decode and load bucket by bucket inside one layerwise-reload session, re-pack, reset the
prefix cache). The first two pushes of each size are warm-up.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time


def measure(
    model_path: str, bucket_mib: list[int], pushes: int, engine_process: str = "actor"
) -> list[dict[str, float]]:
    """One row per bucket size: buckets, MiB, median export and load seconds."""
    from actor.rollout_worker import RolloutWorker
    from common.config import LearnerConfig, ModelConfig, RolloutConfig
    from learner.learner import Learner

    rollout = RolloutConfig(
        batch_size=8,
        group_size=8,
        max_new_tokens=8,
        kv_cache_gib=0.2,
        engine_process=engine_process,
    )
    worker = RolloutWorker(model_path, rollout, ModelConfig(max_model_len=320))
    learner = Learner(model_path, LearnerConfig(num_cpus=2))
    rows = []
    for mib in bucket_mib:
        learner.sender.bucket_bytes = mib << 20
        export, load = [], []
        for i in range(pushes):
            learner.perturb_weights_(1e-4, seed=i)
            start = time.perf_counter()
            update = learner.export_weights()
            exported = time.perf_counter()
            worker.update_weights(update)
            export.append(exported - start)
            load.append(time.perf_counter() - exported)
        rows.append(
            {
                "bucket_mib": mib,
                "buckets": len(update.payload),
                "update_mib": update.num_bytes / (1 << 20),
                "export_s": statistics.median(export[2:]),
                "load_s": statistics.median(load[2:]),
            }
        )
    return rows


def format_rows(rows: list[dict[str, float]]) -> str:
    lines = ["bucket MiB  buckets  update MiB  export ms  load ms"]
    for r in rows:
        lines.append(
            f"{r['bucket_mib']:>10}  {r['buckets']:>7}  {r['update_mib']:>10.1f}  "
            f"{r['export_s'] * 1e3:>9.1f}  {r['load_s'] * 1e3:>7.1f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m launch.bench_push", description=__doc__)
    parser.add_argument("--config", default="configs/bench.toml", help="for its [bench.model]")
    parser.add_argument("--model", help="an HF model directory instead of the bench model")
    parser.add_argument("--bucket-mib", type=int, nargs="+", default=[512, 64, 16, 4])
    parser.add_argument("--pushes", type=int, default=12, help="per size, 2 of them warm-up")
    parser.add_argument(
        "--engine-process",
        choices=("actor", "separate"),
        default="actor",
        help="rollout.engine_process",
    )
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.pushes < 3 or min(args.bucket_mib) < 1:
        print("error: --pushes must be at least 3 and --bucket-mib positive", file=sys.stderr)
        return 2
    model = args.model
    if model is None:
        from launch.bench import build_bench_model, load_bench_config

        config, bench = load_bench_config(args.config, [])
        model = str(build_bench_model(config.run.output_dir, bench["model"]))
    print(format_rows(measure(model, args.bucket_mib, args.pushes, args.engine_process)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
