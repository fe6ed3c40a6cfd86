"""Step-time benchmark: ``python -m bench.launch --config FILE [--steps K] [--vs-trl]``.

Runs K training steps of a config through the real system (the same config loading, fleet and
:class:`launch.loop.driver.Driver` as ``launch.train``), excludes the first ``warmup`` steps, and
prints

- the step-time breakdown (``time/rollout_s``, ``time/reward_s``, ``time/train_s``,
  ``time/weight_sync_s``, ``time/step_s``; medians over the measured steps) and, per role, its
  busy and idle time (idle = step time minus the role's busy time);
- throughput: completion tokens/s and samples/s of the median measured step (wall clock between
  step records; in async mode this is the steady-state period of the pipeline);
- the timeline model's sync vs one-step-off-policy async prediction for N rollout engines on
  their own devices (:mod:`bench.launch.timeline`), from the measured phase times;
- with ``--vs-trl``: the same work through TRL's ``GRPOTrainer`` (:mod:`bench.launch.trl`) and
  the ratio of samples/s, ours / TRL's.

A JSON summary goes to ``<run_dir>/bench.json`` (or ``--out``).

The config file may carry a ``[bench]`` section (not part of the training config): the shape of
the random benchmark model (built into ``<output_dir>/_models/<name>`` and used as
``model.path``), ``steps``, ``warmup``, ``fixed_length`` and TRL's micro-batching. Overrides
``--bench.key value`` work like ``--section.key value``.

Fixed-length completions: ``bench.fixed_length`` sets ``rollout.min_new_tokens`` to
``rollout.max_new_tokens`` and ``rollout.ignore_eos``, so both systems generate exactly
``max_new_tokens`` per completion (a random model would otherwise stop at random lengths).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import statistics
import sys
import time
from contextlib import closing
from pathlib import Path
from typing import Any

from bench.launch import timeline
from bench.launch.trl import import_trl, run_trl, summarize_trl
from bench.launch.workload import (
    build_bench_model,
    connect_own,
    load_bench_config,
    model_parameters,
)
from common.config import Config, ConfigError
from common.help_format import DefaultsHelpFormatter
from launch.data.problems import load_problems
from launch.loop.metrics import mean_present
from launch.train import check_problems, prepare_run_dir

logger = logging.getLogger("bench.launch")


def run_ours(
    config: Config, model_path: str, steps: int
) -> tuple[list[dict[str, float]], list[int]]:
    """K driver steps through a real fleet; each step's metric record (plus its wall time) and
    the problem indices drawn, in order (the prompts TRL gets)."""
    # lazy: Ray, torch and transformers (under the fleet and the driver) take seconds to
    # import; --help and config errors answer first
    import ray
    from transformers import AutoTokenizer

    from launch.fleet.fleet import start_fleet
    from launch.loop.driver import Driver

    run_dir = prepare_run_dir(config, overwrite=True)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    problems = check_problems(config, tokenizer, load_problems(config.data, tokenizer))
    connect_own(config)
    fleet = start_fleet(config, model_path, run_id=config.run.name)
    records, drawn = [], []
    try:
        driver = Driver(config, fleet, problems, tokenizer, run_dir)
        draw = driver.curriculum.next_indices

        def recording_draw(count: int) -> list[int]:
            indices = draw(count)
            drawn.extend(indices)
            return indices

        driver.curriculum.next_indices = recording_draw
        with (run_dir / "metrics.jsonl").open("w") as log, closing(driver.records(1, steps)) as run:
            start = time.perf_counter()
            for record in run:
                step = int(record["step"])
                record["time/wall_s"] = time.perf_counter() - start
                start = time.perf_counter()
                records.append(record)
                log.write(json.dumps(record) + "\n")
                logger.info(
                    "step %d: %.2fs (rollout %.2f, reward %.2f, train %.2f, sync %.3f)",
                    step,
                    record["time/wall_s"],
                    record["time/rollout_s"],
                    record["time/reward_s"],
                    record["time/train_s"],
                    record["time/weight_sync_s"],
                )
    finally:
        fleet.shutdown()
        ray.shutdown()
    return records, drawn


PHASES = ("rollout", "reward", "train", "weight_sync")
# what each role is busy with during a step (the weight push involves learner and engines)
ROLES = {
    "rollout": ("rollout", "weight_sync"),
    "sandbox": ("reward",),
    "learner": ("train", "weight_sync"),
}


def summarize_ours(records: list[dict[str, float]], warmup: int) -> dict[str, Any]:
    """Medians of the phase times over the measured steps, role idle times, throughput."""
    measured = records[warmup:]
    med = {p: statistics.median(r[f"time/{p}_s"] for r in measured) for p in PHASES}
    step_s = statistics.median(r["time/step_s"] for r in measured)
    wall_s = statistics.median(r["time/wall_s"] for r in measured)
    # Per median step, not total / total: in async mode the last step has no next batch to
    # collect and would flatter the total.
    samples = statistics.median(r["train/num_samples"] for r in measured)
    tokens = statistics.median(r["train/num_tokens"] for r in measured)
    roles = {}
    for role, phases in ROLES.items():
        busy = statistics.median(sum(r[f"time/{p}_s"] for p in phases) for r in measured)
        roles[role] = {"busy_s": busy, "idle_s": step_s - busy, "idle_frac": 1 - busy / step_s}
    return {
        "steps_measured": len(measured),
        "step_s": step_s,
        "wall_s": wall_s,
        **{f"{p}_s": v for p, v in med.items()},
        "sync_share": statistics.median(
            r["time/weight_sync_s"] / r["time/step_s"] for r in measured
        ),
        "roles": roles,
        "samples_per_s": samples / wall_s,
        "tokens_per_s": tokens / wall_s,
        "rollout_tokens_per_s": statistics.median(r["rollout/tokens_per_s"] for r in measured),
        "response_len_mean": statistics.fmean(r["rollout/response_len_mean"] for r in measured),
        "reward_mean": mean_present([r["reward/mean"] for r in measured]),
        # the learner's model FLOP/s: its step's model FLOPs (learner/flops.py) over its time
        "learner_tflops": statistics.median(
            r.get("train/model_tflop", 0.0) / r["time/train_s"] for r in measured
        ),
    }


# ---- output ----------------------------------------------------------------------------------


def format_ours(summary: dict[str, Any]) -> str:
    step = summary["step_s"]
    lines = [
        f"ours: median over {summary['steps_measured']} measured steps",
        f"{'phase':<12} {'seconds':>9} {'share':>7}",
    ]
    for phase in PHASES:
        value = summary[f"{phase}_s"]
        lines.append(f"{phase:<12} {value:>9.3f} {value / step:>6.1%}")
    lines.append(f"{'step':<12} {step:>9.3f} {1:>6.0%}   (wall {summary['wall_s']:.3f}s)")
    lines.append(f"{'role':<12} {'busy s':>9} {'idle s':>9} {'idle':>6}")
    for role, value in summary["roles"].items():
        lines.append(
            f"{role:<12} {value['busy_s']:>9.3f} {value['idle_s']:>9.3f} {value['idle_frac']:>6.1%}"
        )
    if summary.get("learner_peak_tflops"):
        lines.append(
            f"learner: {summary['learner_tflops']:.3f} TFLOP/s of model FLOPs, "
            f"{summary['learner_utilisation']:.1%} of the {summary['learner_peak_tflops']:.3f} "
            "TFLOP/s a large matrix product reaches here in the learner's dtype"
        )
    lines.append(
        f"throughput: {summary['samples_per_s']:.2f} samples/s, "
        f"{summary['tokens_per_s']:.0f} completion tokens/s "
        f"(mean completion {summary['response_len_mean']:.1f} tokens; "
        f"weight sync {summary['sync_share']:.1%} of the step)"
    )
    return "\n".join(lines)


def format_trl(summary: dict[str, float]) -> str:
    return "\n".join(
        [
            f"TRL: median over {summary['steps_measured']} measured steps",
            f"{'phase':<12} {'seconds':>9}",
            f"{'generate':<12} {summary['rollout_s']:>9.3f}",
            f"{'reward':<12} {summary['reward_s']:>9.3f}",
            f"{'train':<12} {summary['train_s']:>9.3f}",
            f"{'step':<12} {summary['step_s']:>9.3f}",
            f"throughput: {summary['samples_per_s']:.2f} samples/s, "
            f"{summary['tokens_per_s']:.0f} completion tokens/s "
            f"(mean completion {summary['response_len_mean']:.1f} tokens)",
        ]
    )


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        formatter_class=DefaultsHelpFormatter,
        prog="python -m bench.launch",
        description="Step-time breakdown and throughput of K training steps (optionally vs TRL).",
        epilog="--section.key VALUE overrides the config (and --bench.key VALUE its [bench])",
    )
    parser.add_argument("--config", default="configs/bench.toml")
    parser.add_argument(
        "--steps",
        type=int,
        help="steps to run, warm-up included; default: the config's bench.steps",
    )
    parser.add_argument("--vs-trl", action="store_true", help="also run TRL's GRPOTrainer")
    parser.add_argument("--out", help="JSON summary path (default: <run_dir>/bench.json)")
    return parser.parse_known_args(argv)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    args, overrides = parse_args(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        config, bench = _load(args, overrides)
    except _UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    spec = bench["model"]
    model_path = str(build_bench_model(config.run.output_dir, spec))
    config.model.path = model_path
    steps, warmup = bench["steps"], bench["warmup"]

    if bench["fixed_length"]:
        config.rollout.min_new_tokens = config.rollout.max_new_tokens
        config.rollout.ignore_eos = True
    records, drawn = run_ours(config, model_path, steps)
    ours = summarize_ours(records, warmup)
    _add_utilisation(ours, config)
    phases = timeline.PhaseTimes(
        rollout=ours["rollout_s"],
        reward=ours["reward_s"],
        train=ours["train_s"],
        sync=ours["weight_sync_s"],
    )
    overlap = bool(bench["overlap_reward"])
    groups = config.rollout.prompts_per_step
    predictions = timeline.predict_table(phases, tuple(bench["engines"]), overlap, groups)
    result: dict[str, Any] = {
        "config": args.config,
        "overrides": overrides,
        "steps": steps,
        "warmup": warmup,
        "model": {**spec, "parameters": model_parameters(spec), "path": model_path},
        "batch_size": config.rollout.batch_size,
        "group_size": config.rollout.group_size,
        "max_new_tokens": config.rollout.max_new_tokens,
        "fixed_length": bench["fixed_length"],
        "load_avg_before": os.getloadavg(),
        "ours": ours,
        "ours_steps": [
            {k: r[k] for k in ("time/wall_s", "time/step_s", *(f"time/{p}_s" for p in PHASES))}
            for r in records
        ],
        "timeline": {"overlap_reward": overlap, "predictions": [p.as_dict() for p in predictions]},
    }
    _print_ours(config, spec, ours, predictions, overlap)
    if args.vs_trl:
        result.update(_vs_trl(config, bench, model_path, drawn, ours))
    result["load_avg_after"] = os.getloadavg()
    out = Path(args.out) if args.out else config.run_dir / "bench.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"summary written to {out}")
    return 0


def _add_utilisation(ours: dict[str, Any], config: Config) -> None:
    """The learner's TFLOP/s against the matmul peak measured on this machine, when there is
    one (``learner.flops.learner_peak_flops``)."""
    # lazy: learner.flops imports torch (seconds); --help and config errors answer first
    from learner.flops import learner_peak_flops

    peak = learner_peak_flops(config.learner)
    if peak:
        ours["learner_peak_tflops"] = peak / 1e12
        ours["learner_utilisation"] = ours["learner_tflops"] * 1e12 / peak


class _UsageError(Exception):
    """A mistake in the command or its config, reported before anything starts."""


def _load(args: argparse.Namespace, overrides: list[str]) -> tuple[Config, dict[str, Any]]:
    """The training config and its ``[bench]`` section, with ``--steps`` applied; with
    ``--vs-trl`` also checks that TRL imports, so a missing extra fails before anything runs."""
    try:
        config, bench = load_bench_config(args.config, overrides)
    except ConfigError as exc:
        raise _UsageError(exc) from None
    if args.steps is not None:
        if args.steps <= bench["warmup"]:
            raise _UsageError(f"--steps must exceed bench.warmup ({bench['warmup']})")
        bench["steps"] = args.steps
    if args.vs_trl:
        try:
            import_trl()  # fail before starting anything
        except RuntimeError as exc:
            raise _UsageError(exc) from None
    return config, bench


def _print_ours(config: Config, spec: dict, ours: dict, predictions, overlap: bool) -> None:
    print()
    print(
        f"model {spec['name']}: {model_parameters(spec) / 1e6:.1f}M parameters; "
        f"{config.rollout.batch_size} samples/step ({config.rollout.prompts_per_step} prompts x "
        f"G={config.rollout.group_size}), max {config.rollout.max_new_tokens} new tokens"
    )
    print(format_ours(ours))
    print()
    print(
        "timeline model (separate devices: N engines + 1 learner; measured phases; "
        f"reward overlap {'on' if overlap else 'off'}):"
    )
    print(timeline.format_predictions(predictions, config.rollout.batch_size))


def _vs_trl(
    config: Config, bench: dict, model_path: str, drawn: list[int], ours: dict
) -> dict[str, Any]:
    """TRL's GRPOTrainer on the same prompts, in the order our run drew them; the result's
    TRL entries (and its summary printed)."""
    problems = load_problems(config.data)
    # Ray runs its workers (our rollout, learner and sandbox actors) at niceness 15; give
    # TRL the same priority, or on a shared machine it would out-compete other jobs that
    # our actors yield to.
    niceness = os.nice(max(0, bench["trl_niceness"] - os.nice(0)))
    trl_run = run_trl(
        config,
        model_path,
        problems,
        drawn,
        bench["steps"],
        str(config.run_dir / "trl"),
        fixed_length=bench["fixed_length"],
        grad_accum=bench["trl_grad_accum"],
        threads=bench["trl_threads"],
    )
    trl = summarize_trl(trl_run, bench["warmup"])
    trl["version"] = trl_run.trl_version
    ratio = ours["samples_per_s"] / trl["samples_per_s"]
    print()
    print(format_trl(trl))
    print(f"\nsamples/s ours / TRL {trl_run.trl_version}: {ratio:.2f}x")
    return {
        "trl_niceness": niceness,
        "trl": trl,
        "trl_steps": [dataclasses.asdict(s) for s in trl_run.steps],
        "ratio_samples_per_s": ratio,
    }
