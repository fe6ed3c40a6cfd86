"""How long one weight push takes, per bucket size: ``python -m bench.launch.push``.

Builds the benchmark model of ``configs/bench.toml`` (or takes ``--model``), starts one vLLM
engine (its core in this process, or in its own with ``--engine-process separate``) and one
learner in this process (no Ray: this isolates the transport from actor calls),
and for each ``--bucket-mib`` pushes ``--pushes`` perturbed versions of the weights, printing
the median export time (learner: state dict to safetensors buckets) and load time (engine:
decode and load bucket by bucket inside one layerwise-reload session, re-pack, reset the
prefix cache). The first two pushes of each size are warm-up.

``--through-ray`` measures the push the way a training step makes it instead: the learner and
the engine each in a Ray actor of a private local cluster, the update through the object
store. It adds a ``push ms`` column, the driver's wait from the moment the update exists to the
engine's answer (what synchronous mode waits for after the export), and splits what Ray adds
to the engine's own load time: ``dispatch ms`` from the update existing to the engine starting
its load (the actor call and the object fetch) and ``reply ms`` from the load's end to the
driver having the answer (wall clocks of one host: the cluster is local).
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time

from bench.launch.workload import build_bench_model, connect_own, load_bench_config
from common.arguments import positive_int
from common.config import Config, ConfigError, LearnerConfig, ModelConfig, RolloutConfig
from launch.data.model_source import locate_model


def _rollout_config(engine_process: str):
    return RolloutConfig(
        batch_size=8,
        group_size=8,
        max_new_tokens=8,
        kv_cache_gib=0.2,
        engine_process=engine_process,
    )


def _row(mib: int, update, export: list[float], load: list[float]) -> dict[str, float]:
    return {
        "bucket_mib": mib,
        "buckets": len(update.payload),
        "update_mib": update.num_bytes / (1 << 20),
        "export_s": statistics.median(export[2:]),
        "load_s": statistics.median(load[2:]),
    }


def measure(
    model_path: str, bucket_mib: list[int], pushes: int, engine_process: str = "actor"
) -> list[dict[str, float]]:
    """One row per bucket size: buckets, MiB, median export and load seconds."""
    # lazy: torch and vLLM take seconds to import; --help and argument errors answer first
    from actor.rollout_worker import RolloutWorker
    from bench.learner.perturb import PerturbableLearner

    rollout = _rollout_config(engine_process)
    worker = RolloutWorker(model_path, rollout, ModelConfig(max_model_len=320))
    learner = PerturbableLearner(model_path, LearnerConfig(num_cpus=2))
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
        rows.append(_row(mib, update, export, load))
    return rows


def measure_through_ray(
    model_path: str, bucket_mib: list[int], pushes: int, engine_process: str = "actor"
) -> list[dict[str, float]]:
    """Like :func:`measure` with the learner and the engine in Ray actors (one CPU each):
    ``export_s`` is the learner call until its update exists, ``load_s`` the engine's own
    time, ``push_s`` the driver's wait from the update existing to the engine's answer."""
    # lazy: Ray, torch and vLLM, as in measure
    import ray

    from actor.rollout_worker import RolloutWorker
    from bench.learner.perturb import PerturbableLearner
    from launch.fleet.actors import actor_options

    connect_own(Config())
    try:
        worker_cls = ray.remote(RolloutWorker).options(**actor_options("bench-push-rollout", 1))
        rollout = _rollout_config(engine_process)
        worker = worker_cls.remote(model_path, rollout, ModelConfig(max_model_len=320))
        ray.get(worker.ready.remote())
        rows = []
        for mib in bucket_mib:  # a learner per size: the bucket size is fixed at construction
            options = actor_options(f"bench-push-learner-{mib}", 1)
            learner_cls = ray.remote(PerturbableLearner).options(**options)
            learner = learner_cls.remote(
                model_path, LearnerConfig(num_cpus=1), bucket_bytes=mib << 20
            )
            export, load, push, dispatch = [], [], [], []
            for i in range(pushes):
                ray.get(learner.perturb_weights_.remote(1e-4, i))
                start = time.perf_counter()
                update = learner.export_weights.remote()
                ray.wait([update], fetch_local=False)
                exported, exported_at = time.perf_counter(), time.time()
                loaded = ray.get(worker.update_weights.remote(update))
                push.append(time.perf_counter() - exported)
                export.append(exported - start)
                load.append(loaded["seconds"])
                dispatch.append(loaded["started_at"] - exported_at)
            row = _row(mib, ray.get(update), export, load)
            row["dispatch_s"] = statistics.median(dispatch[2:])
            row["push_s"] = statistics.median(push[2:])
            row["reply_s"] = max(0.0, row["push_s"] - row["dispatch_s"] - row["load_s"])
            rows.append(row)
            ray.kill(learner)  # its CPU is the next size's learner's
        return rows
    finally:
        ray.shutdown()  # the engine's actor with it, and any learner an error left behind


def format_rows(rows: list[dict[str, float]]) -> str:
    through_ray = bool(rows) and "push_s" in rows[0]
    ray_columns = ("dispatch", "reply", "push") if through_ray else ()
    header = "bucket MiB  buckets  update MiB  export ms  load ms"
    lines = [header + "".join(f"  {name} ms" for name in ray_columns)]
    for r in rows:
        line = (
            f"{r['bucket_mib']:>10}  {r['buckets']:>7}  {r['update_mib']:>10.1f}  "
            f"{r['export_s'] * 1e3:>9.1f}  {r['load_s'] * 1e3:>7.1f}"
        )
        for name in ray_columns:
            line += f"  {r[name + '_s'] * 1e3:>{len(name) + 3}.1f}"
        lines.append(line)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.launch.push", description=__doc__)
    parser.add_argument("--config", default="configs/bench.toml", help="for its [bench.model]")
    parser.add_argument("--model", help="an HF model directory instead of the bench model")
    parser.add_argument("--bucket-mib", type=positive_int, nargs="+", default=[512, 64, 16, 4])
    parser.add_argument("--pushes", type=int, default=12, help="per size, 2 of them warm-up")
    parser.add_argument(
        "--engine-process",
        choices=("actor", "separate"),
        default="actor",
        help="rollout.engine_process",
    )
    parser.add_argument(
        "--through-ray",
        action="store_true",
        help="learner and engine in Ray actors, the update through the object store",
    )
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.pushes < 3:
        print("error: --pushes must be at least 3 (2 of them warm-up)", file=sys.stderr)
        return 2
    try:  # before any engine starts; the model as every other command finds it
        if args.model is not None:
            model = locate_model(args.model, "--model")
        else:
            config, bench = load_bench_config(args.config, [])
            model = str(build_bench_model(config.run.output_dir, bench["model"]))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    run = measure_through_ray if args.through_ray else measure
    print(format_rows(run(model, args.bucket_mib, args.pushes, args.engine_process)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
