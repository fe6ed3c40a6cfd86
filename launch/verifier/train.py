"""Train an outcome verifier on a run's own rollout records: ``python -m launch.verifier.train``.

    python -m launch.verifier.train --rollouts runs/demo/rollouts --model runs/demo/checkpoint \
        --out runs/demo/verifier

Every record (``launch.loop.rollouts``) is a program with the sandbox's verdict: labels no one
annotated. The verifier, a two-label sequence classifier on the base model saved in Hugging Face
format, learns ``prompt + completion`` -> the fraction of tests passed (``--target fraction``: a
policy's passes are rare and cluster on a few problems, while partial credit says for every
program how close it came) or the verdict (``--target pass``); the ``scorer`` reward term and
``launch.evaluate --rerank`` load it unchanged. ``--kind process`` labels step prefixes by Monte
Carlo continuations instead (``launch.verifier.process_labels``).

The split is by problem family (``launch.verifier.split``): programs for one problem look alike,
so a random split would grade the verifier on problems it trained on. Texts are tokenised as the
scorer does (cut and padded on the left). docs/verifier.md has the rest.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import random
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from common.arguments import (
    OutputPathError,
    check_output_dir,
    non_negative_int,
    positive_float,
    positive_int,
)
from common.config import ConfigError, SandboxConfig
from common.datasets import FORMATS, DatasetError
from common.help_format import DefaultsHelpFormatter
from common.prompts import encode_prompt
from launch.data.model_source import locate_model
from launch.data.problems import load_rendered
from launch.evaluate import build_worker, default_max_model_len, load_tokenizer
from launch.loop.rollouts import read_rollouts
from launch.verifier.process_labels import mc_step_labels
from launch.verifier.split import SplitError, problem_families, split_families
from sandbox.trusted.pool import SandboxPool

logger = logging.getLogger("launch.verifier.train")

#: Calibration bins of the printed table: [0, 0.2), [0.2, 0.4), ... [0.8, 1.0].
BINS = 5


class VerifierError(ValueError):
    """A user mistake: a missing file, no records, too few problems to split."""


# ---- the examples --------------------------------------------------------------------------


def judged_single_answer(row: dict[str, Any]) -> bool:
    """Whether a record is one answer to its task with a verdict: not an infra error (no
    verdict), a multi-turn transcript (feedback in it is not the model's program) or a
    self-play role (its prompt is not the task's)."""
    if row.get("verdict") in (None, "infra_error"):
        return False
    return row.get("turns", 1) == 1 and row.get("role", "solver") == "solver"


def examples_from(rows: Sequence[dict[str, Any]], target: str) -> list[dict[str, Any]]:
    """One example per distinct (problem, prompt + completion), label from its fraction of tests
    passed (or its verdict); rows without a verdict (infra errors) are left out, and so are
    multi-turn transcripts and self-play roles: a verifier scores one answer to the task.

    The fraction counts the tests not run as not passed: those after a crash or timeout (as the
    partial execution reward does), and with a binary reward (``mode = "binary"``) those after
    the first failing test, where it is a lower bound of the program's own fraction.
    ``runs``: the program's first failing test (if any) failed on a wrong answer, not on a
    syntax error, crash, timeout or limit."""
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rows:
        if not judged_single_answer(row):
            continue
        text = row["prompt"] + row["completion"]
        passed = row["verdict"] == "passed"
        total = row.get("tests_total") or 0
        fraction = row["tests_passed"] / total if total else float(passed)
        key = (row["problem_id"], text)
        if key not in seen:
            label = float(passed) if target == "pass" else fraction
            runs = row["verdict"] in ("passed", "failed")
            seen[key] = {"problem_id": row["problem_id"], "text": text, "label": label,
                         "passed": passed, "runs": runs, "count": 0}  # fmt: skip
        seen[key]["count"] += 1
    return list(seen.values())


def split_by_problem(
    problem_ids: Sequence[str],
    held_out: float,
    seed: int,
    families: Mapping[str, str] | None = None,
) -> tuple[list[str], list[str]]:
    """Training and held-out problem ids, disjoint; at least one of each. ``families`` (from
    :func:`launch.verifier.split.problem_families`; default: each problem alone) keeps
    a problem, the tasks derived from it and the problems sharing its prompt on one side."""
    families = families or {}
    try:
        return split_families({p: families.get(p, p) for p in problem_ids}, held_out, seed)
    except SplitError as exc:
        raise VerifierError(str(exc)) from None


# ---- the metrics ---------------------------------------------------------------------------


def auc(scores: Sequence[float], positive: Sequence[bool]) -> float:
    """Area under the ROC curve: the probability that a random passing program scores above a
    random failing one, ties counting half (Mann-Whitney). NaN without both kinds."""
    pos = [s for s, p in zip(scores, positive, strict=True) if p]
    neg = [s for s, p in zip(scores, positive, strict=True) if not p]
    if not pos or not neg:
        return math.nan
    order = sorted(range(len(scores)), key=lambda i: scores[i])
    ranks = [0.0] * len(scores)
    i = 0
    while i < len(order):  # average ranks over ties
        j = i
        while j + 1 < len(order) and scores[order[j + 1]] == scores[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    pos_ranks = sum(r for r, p in zip(ranks, positive, strict=True) if p)
    return (pos_ranks - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg))


def calibration(scores: Sequence[float], positive: Sequence[bool]) -> list[dict[str, float]]:
    """Per bin of predicted probability: count, mean prediction and observed pass rate."""
    table = []
    for b in range(BINS):
        low, high = b / BINS, (b + 1) / BINS
        members = [
            (s, p)
            for s, p in zip(scores, positive, strict=True)
            if low <= s < high or (b == BINS - 1 and s == 1.0)
        ]
        if members:
            table.append({
                "low": low,
                "high": high,
                "count": len(members),
                "predicted": sum(s for s, _ in members) / len(members),
                "observed": sum(p for _, p in members) / len(members),
            })  # fmt: skip
    return table


def evaluate_scores(
    scores: Sequence[float], positive: Sequence[bool], runs: Sequence[bool] | None = None
) -> dict[str, Any]:
    """Accuracy (score >= 0.5 against the verdict), AUC and calibration; with ``runs`` (per
    example: its failure, if any, was a wrong answer rather than a syntax error, crash or
    timeout) also the AUC among the programs that run. Most of a young policy's failures do
    not parse or crash, and telling those from a pass is the easy part: ``auc_running`` is the
    part that needs the verifier to check the answer."""
    correct = sum((s >= 0.5) == p for s, p in zip(scores, positive, strict=True))
    metrics = {
        "examples": len(scores),
        "pass_rate": sum(positive) / max(len(positive), 1),
        "accuracy": correct / max(len(scores), 1),
        "auc": auc(scores, positive),
        "calibration": calibration(scores, positive),
    }
    if runs is not None:
        running = [i for i, (_, r) in enumerate(zip(scores, runs, strict=True)) if r]
        metrics["running"] = len(running)
        metrics["auc_running"] = auc([scores[i] for i in running], [positive[i] for i in running])
    return metrics


def format_report(metrics: dict[str, Any], unit: str = "distinct programs") -> str:
    lines = [
        f"held-out problems: {metrics['examples']} {unit}, pass rate {metrics['pass_rate']:.3f}",
        f"accuracy {metrics['accuracy']:.3f}  AUC {metrics['auc']:.3f}",
    ]
    if "auc_running" in metrics:
        lines.append(
            f"AUC among the {metrics['running']} programs that run (no syntax error, crash or "
            f"timeout): {metrics['auc_running']:.3f}"
        )
    lines.append("calibration (predicted score -> observed pass rate):")
    for row in metrics["calibration"]:
        lines.append(
            f"  [{row['low']:.1f}, {row['high']:.1f}): {row['count']:>6} programs, "
            f"predicted {row['predicted']:.3f}, observed {row['observed']:.3f}"
        )
    return "\n".join(lines)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        formatter_class=DefaultsHelpFormatter,
        prog="python -m launch.verifier.train",
        description="Train an outcome verifier on a run's rollout records.",
    )
    parser.add_argument(
        "--rollouts", nargs="+", required=True, help="a run's rollouts/ directory, or files"
    )
    parser.add_argument("--model", required=True, help="base model (an HF directory)")
    parser.add_argument("--out", required=True, help="where the verifier is saved")
    parser.add_argument(
        "--kind",
        choices=["outcome", "process"],
        default="outcome",
        help="outcome: one score per program; process: one per step prefix (Monte Carlo labels)",
    )
    parser.add_argument(
        "--target",
        choices=["fraction", "pass"],
        default="fraction",
        help="label: the fraction of tests passed (partial credit), or pass/fail",
    )
    parser.add_argument("--held-out", type=float, default=0.2, help="fraction of the problems")
    parser.add_argument("--epochs", type=positive_int, default=3)
    parser.add_argument("--lr", type=positive_float, default=1e-4)
    parser.add_argument("--batch-size", type=positive_int, default=32)
    parser.add_argument(
        "--max-length", type=positive_int, default=256, help="tokens, cut from the left"
    )
    parser.add_argument("--lora-rank", type=non_negative_int, default=0, help="0: full fine-tuning")
    parser.add_argument(
        "--max-examples", type=non_negative_int, default=0, help="0: all distinct programs"
    )
    parser.add_argument("--seed", type=int, default=0)
    _add_process_flags(parser)
    args = parser.parse_args(argv)
    if args.kind == "process" and not args.problems:
        parser.error("--kind process needs --problems: the continuations run against its tests")
    return args


def _add_process_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of the Monte Carlo step labels, which only ``--kind process`` reads."""
    process = parser.add_argument_group("process verifier (--kind process)")
    process.add_argument("--problems", help="the records' problems: a file, HF name or synthetic")
    process.add_argument(
        "--split", default=None, help="its split, as in launch.evaluate; default: every row"
    )
    process.add_argument("--format", default="auto", choices=FORMATS)
    process.add_argument("--policy", help="model that continues the prefixes (default: --model)")
    process.add_argument("--mc-programs", type=positive_int, default=64, help="programs to label")
    process.add_argument(
        "--mc-samples", type=positive_int, default=4, help="continuations per prefix"
    )
    process.add_argument("--step-split", default="line", help="line, blank_line or a regex")
    process.add_argument("--temperature", type=float, default=1.0)
    process.add_argument("--max-new-tokens", type=positive_int, default=256)
    process.add_argument("--stop", action="append", help="stop string (repeatable)")
    process.add_argument(
        "--max-model-len", type=non_negative_int, default=0, help="0: the model's, <= 4096"
    )
    process.add_argument("--kv-cache-gib", type=positive_float, default=1.0)
    dtypes = ["bfloat16", "float16", "float32"]
    process.add_argument("--dtype", default="bfloat16", choices=dtypes)
    process.add_argument("--workers", type=positive_int, default=2, help="sandbox workers")


def _read(paths: list[str]) -> list[dict[str, Any]]:
    for path in paths:
        if not Path(path).exists():
            raise VerifierError(f"--rollouts: {path} does not exist")
    try:
        rows = list(read_rollouts(paths))
    except (OSError, ValueError, KeyError) as exc:
        raise VerifierError(f"--rollouts: {exc}") from None
    if not rows:
        raise VerifierError(f"--rollouts: no records in {' '.join(paths)}")
    return rows


def run(args: argparse.Namespace) -> dict[str, Any]:
    if not 0 < args.held_out < 1:
        raise VerifierError(f"--held-out must be between 0 and 1, got {args.held_out}")
    check_output_dir(args.out, "--out", overwrite=True)  # a file there: refused before training
    # lazy: torch and transformers take seconds to import; --help and argument errors answer first
    from launch.verifier.model import Verifier

    model_path = locate_model(args.model, "--model")
    rows = _read(args.rollouts)
    if args.kind == "process":
        examples = process_examples(args, rows, model_path)
    else:
        examples = examples_from(rows, args.target)
    train_ids, held_ids = split_by_problem([e["problem_id"] for e in examples], args.held_out,
                                           args.seed, problem_families(rows))  # fmt: skip
    held = set(held_ids)
    training = [e for e in examples if e["problem_id"] not in held]
    evaluation = [e for e in examples if e["problem_id"] in held]
    if args.max_examples:
        random.Random(args.seed).shuffle(training)
        training = training[: args.max_examples]
    unit = "step prefixes" if args.kind == "process" else "distinct programs"
    print(
        f"{len(rows)} records, {len(examples)} {unit}; training on "
        f"{len(training)} from {len(train_ids)} problems, holding out {len(evaluation)} from "
        f"{len(held_ids)} ({', '.join(held_ids[:5])}{', ...' if len(held_ids) > 5 else ''})",
        flush=True,
    )
    verifier = Verifier(model_path, args.max_length, args.lora_rank, args.seed)
    losses = verifier.train(training, args.epochs, args.lr, args.batch_size, args.seed)
    scores = verifier.scores([e["text"] for e in evaluation])
    runs = [e["runs"] for e in evaluation] if args.kind == "outcome" else None
    metrics = evaluate_scores(scores, [e["passed"] for e in evaluation], runs)
    print(format_report(metrics, unit), flush=True)
    out = Path(args.out)
    verifier.save(out)
    summary = {
        "kind": args.kind,
        "step_split": args.step_split if args.kind == "process" else None,
        "target": args.target if args.kind == "outcome" else None,
        "base_model": args.model,
        "train_problems": train_ids,
        "held_out_problems": held_ids,
        "train_examples": len(training),
        "max_length": args.max_length,
        "losses": losses,
        "held_out": metrics,
    }
    text = json.dumps(_finite(summary), indent=2, allow_nan=False)
    (out / "verifier.json").write_text(text + "\n")
    steps = f', step_split = "{args.step_split}"' if args.kind == "process" else ""
    options = f'path = "{out}", max_length = {args.max_length}{steps}'
    print(f"saved to {out} (scorer term: options = {{ {options} }})")
    return summary


def _finite(value: Any) -> Any:
    """``value`` with every NaN (an AUC without both classes, say) as None: strict JSON."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value


def process_examples(
    args: argparse.Namespace, rows: Sequence[dict[str, Any]], model_path: str
) -> list[dict[str, Any]]:
    """Monte Carlo step labels (``launch.verifier.process_labels``) for ``--mc-programs`` of the
    records' programs, through an in-process vLLM engine and a sandbox pool."""
    policy = locate_model(args.policy or model_path, "--policy")
    tokenizer = load_tokenizer(policy)
    problems = {
        p.problem_id: p
        for p in load_rendered(args.problems, args.split, args.format, "auto", tokenizer)
    }
    distinct = {}
    for row in rows:
        if row["problem_id"] in problems and judged_single_answer(row):
            distinct.setdefault((row["problem_id"], row["completion"]), row)
    if not distinct:
        raise VerifierError(f"--problems: none of the records' problems is in {args.problems}")
    chosen = sorted(distinct)
    random.Random(args.seed).shuffle(chosen)
    programs = [(problems[pid], completion) for pid, completion in chosen[: args.mc_programs]]
    settings = argparse.Namespace(
        model=policy, dtype=args.dtype, n=args.mc_samples, temperature=args.temperature,
        max_new_tokens=args.max_new_tokens, kv_cache_gib=args.kv_cache_gib, stop=args.stop,
        seed=args.seed,
    )  # fmt: skip
    worker = build_worker(settings, args.max_model_len or default_max_model_len(policy))
    print(f"labelling the steps of {len(programs)} programs, {args.mc_samples} continuations "
          "per prefix", flush=True)  # fmt: skip
    sandbox = SandboxConfig(num_workers=args.workers)
    with SandboxPool(sandbox) as pool:
        labels = mc_step_labels(
            programs,
            worker.generate,
            lambda jobs: pool.run(jobs, stop_at_first_failure=True),
            lambda text: encode_prompt(tokenizer, text),
            args.mc_samples,
            args.step_split,
            args.seed,
        )
    return [
        {"problem_id": label.problem_id, "text": label.text, "label": label.label,
         "passed": label.label >= 0.5, "step": label.step, "count": 1}
        for label in labels
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING)
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        run(args)
    except (VerifierError, ConfigError, DatasetError, OutputPathError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
