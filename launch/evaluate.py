"""Evaluate a model on a problem set: sample n completions per problem, execute, report pass@k.

    python -m launch.evaluate --model runs/NAME/checkpoint [--n N] [--k K,...] [--out DIR]
    python -m launch.evaluate --model PATH --problems FILE_OR_NAME [--split SPLIT] [--n N]
        [--k K,...] [--temperature T] [--max-new-tokens N] [--limit N] [--out DIR] [--overwrite]

A training run's checkpoint (``runs/NAME/checkpoint``, ``runs/NAME/checkpoints/step-N``, or the
run directory ``runs/NAME`` for its latest checkpoint) is evaluated as the run generated: unless
the flag is given, the problems, split, format and prompt template (``[data]``), max_new_tokens,
stop strings and temperature (``[rollout]``), the context and dtype (``[model]``), the sandbox's
time limits and the seed (``run.seed``) come from the run's ``config.toml`` (:data:`RUN_SETTINGS`).
One line on stderr says which did, and ``summary.json`` names the config (``run_config``). Any
other model takes the defaults listed with each option below and needs ``--problems``; without
``--split`` every row of the problems file is evaluated.

Generation reuses :class:`actor.rollout_worker.RolloutWorker` in-process (no Ray), scoring the
:class:`sandbox.trusted.pool.SandboxPool`: the prompts, sampling and judging of training, by
:mod:`launch.loop.evaluation` (also the driver's ``eval.every``); pass@k is Chen et al. 2021's
unbiased estimator (overall, per kind, difficulty and test group). ``samples.jsonl`` (one row
per completion) and ``summary.json`` go into ``--out``, checked before the engine starts: one
that holds something is refused unless ``--overwrite``. Progress on stderr, scores on stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import json
import math
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from common.arguments import (
    OutputPathError,
    check_output_dir,
    non_negative_int,
    positive_float,
    positive_int,
)
from common.config import (
    Config,
    ConfigError,
    ModelConfig,
    RolloutConfig,
    SandboxConfig,
    ScorerOptions,
    load_config,
)
from common.config.sandbox import ISOLATION_LEVELS, MIN_ISOLATION_HELP
from common.datasets import FORMATS, DatasetError
from common.help_format import DefaultsHelpFormatter
from common.prompts import PromptError
from common.types import Problem, Verdict
from launch import console
from launch.data.model_source import locate_model
from launch.data.problems import encode_prompts, load_rendered
from launch.loop.checkpoint import CHECKPOINTS, LATEST
from launch.loop.evaluation import EvalError, group_summary, sample_and_score, summarize
from launch.loop.passk import parse_ks
from sandbox.trusted.pool import SandboxIsolationError, SandboxPool

#: What an evaluation writes into --out: an earlier one's are replaced only with --overwrite.
RESULTS = ("samples.jsonl", "summary.json")
#: The resolved config a training run writes into its directory (``launch.train``).
RUN_CONFIG = "config.toml"
#: What an evaluation of a training run's checkpoint takes from the run's config.toml when the
#: flag is not given: the flag's dest -> (the config's field, the default without a run).
RUN_SETTINGS = {
    "problems": ("data.source", None),
    "split": ("data.split", None),
    "format": ("data.format", "auto"),
    "template": ("data.prompt_template", "auto"),
    "max_new_tokens": ("rollout.max_new_tokens", 512),
    "stop": ("rollout.stop", []),
    "temperature": ("rollout.temperature", 0.8),
    "max_model_len": ("model.max_model_len", 0),
    "dtype": ("model.dtype", "bfloat16"),
    "seed": ("run.seed", 0),
    "timeout_s": ("sandbox.timeout_s", 10.0),
}


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def find_run(model: str) -> tuple[Path | None, str]:
    """The training run directory ``model`` belongs to (None: none), and the model to load.

    A run directory (it holds ``config.toml`` and is no model) stands for its latest checkpoint,
    ``<run>/checkpoint``; ``<run>/checkpoint`` and ``<run>/checkpoints/step-N`` are the run's.
    Paths are taken as written: ``<run>/checkpoint`` is a symlink into ``checkpoints/``.
    """
    path = Path(model).expanduser()
    if not path.is_dir():
        return None, model  # a hub name, or a path that locate_model refuses
    if (path / RUN_CONFIG).is_file() and not (path / "config.json").is_file():
        if not (path / LATEST).is_dir():
            raise ConfigError(
                f"--model: {model} is a training run without a checkpoint ({path / LATEST} is "
                "missing): give a model directory"
            )
        return path, str(Path(model) / LATEST)
    parents = [path.parent, *([path.parent.parent] if path.parent.name == CHECKPOINTS else [])]
    return next((run for run in parents if (run / RUN_CONFIG).is_file()), None), model


def load_run_config(path: Path) -> Config:
    """A training run's config.toml; a ConfigError of one line naming the file if it does not
    load (not TOML, an unknown or moved key, an invalid value)."""
    try:
        return load_config(path)
    except ConfigError as exc:
        text = " ".join(line.strip() for line in str(exc).splitlines())
        if str(path) not in text:
            text = f"{path}: {text}"
        raise ConfigError(f"{text} (the config of the training run that --model is in)") from None


def apply_run_settings(args: argparse.Namespace) -> None:
    """Fill each setting of :data:`RUN_SETTINGS` that no flag gave (None) from ``--model``'s
    training run, else with its default. Sets ``args.run_config`` (the config any setting came
    from, else None), ``args.from_run`` (which, with their values) and ``args.test_timeout_s``
    (the run's ``sandbox.test_timeout_s`` with its ``timeout_s``, else ``--timeout-s``)."""
    run, args.model = find_run(args.model)
    config = None if run is None else load_run_config(run / RUN_CONFIG)
    args.from_run = {}
    for dest, (field, default) in RUN_SETTINGS.items():
        if getattr(args, dest) is not None:
            continue
        if config is not None:
            default = args.from_run[dest] = functools.reduce(getattr, field.split("."), config)
        setattr(args, dest, copy.copy(default))
    args.test_timeout_s = args.timeout_s
    if config is not None and "timeout_s" in args.from_run:
        args.test_timeout_s = args.from_run["test_timeout_s"] = config.sandbox.test_timeout_s
    args.run_config = str(run / RUN_CONFIG) if args.from_run else None


def _say_run_settings(args: argparse.Namespace) -> None:
    if args.run_config:
        taken = ", ".join(
            f"{name} {value!r}" if isinstance(value, list) else f"{name} {value}"
            for name, value in args.from_run.items()
        )
        _stderr(f"settings from {args.run_config}: {taken} (flags override them)")


def default_max_model_len(model_path: str) -> int:
    """The model's context (config.json), capped at 4096 to keep the KV cache small."""
    config = Path(model_path) / "config.json"
    if config.is_file():
        limit = json.loads(config.read_text()).get("max_position_embeddings")
        if isinstance(limit, int) and limit > 0:
            return min(limit, 4096)
    return 4096


def _check_lengths(problems: Sequence[Problem], tokenizer, max_new_tokens: int, max_len: int):
    for problem, ids in zip(problems, encode_prompts(problems, tokenizer), strict=True):
        if len(ids) + max_new_tokens > max_len:
            raise EvalError(
                f"problem {problem.problem_id}: prompt ({len(ids)} tokens) + --max-new-tokens "
                f"({max_new_tokens}) exceeds the context ({max_len}); raise --max-model-len "
                "or lower --max-new-tokens"
            )


def rollout_config(args: argparse.Namespace):
    """Sampling settings of an evaluation, as the rollout worker reads them."""
    group = max(args.n, 2)  # RolloutConfig validates training batches; evaluation has no groups
    return RolloutConfig(
        batch_size=group,
        group_size=group,
        max_new_tokens=args.max_new_tokens,
        kv_cache_gib=args.kv_cache_gib,
        stop=args.stop or [],
    ).model_copy(update={"temperature": args.temperature})  # 0 (greedy) is fine for evaluation


def build_worker(args: argparse.Namespace, max_len: int):
    """An in-process rollout worker (one vLLM engine) for the evaluation's model."""
    # lazy: vLLM and torch take seconds to import; --help and argument errors answer at once
    from actor.rollout_worker import RolloutWorker

    model = ModelConfig(path=args.model, dtype=args.dtype, max_model_len=max_len)
    return RolloutWorker(args.model, rollout_config(args), model, seed=args.seed)


def rerank(records: Sequence[dict], scores: Sequence[float], n: int = 1) -> float:
    """pass@1 of the sample the verifier ranks first in each problem (the earliest sample on a
    tie); samples without a verdict are never chosen. Only problems with at least ``n`` judged
    samples count: the problems pass@n averages over (``launch.loop.passk.mean_pass_at_k``
    leaves out the others), so the two are comparable. NaN when no problem counts."""
    best: dict[str, tuple[float, bool]] = {}
    judged: Counter = Counter()
    for record, score in zip(records, scores, strict=True):
        if record["verdict"] == Verdict.INFRA_ERROR.value:
            continue
        key = record["task_id"]
        judged[key] += 1
        if key not in best or score > best[key][0]:
            best[key] = (score, bool(record["passed"]))
    counted = [passed for key, (_, passed) in best.items() if judged[key] >= n]
    return sum(counted) / len(counted) if counted else math.nan


def verifier_scores(
    verifier: str, problems: Sequence[Problem], records: Sequence[dict], max_length: int = 0
) -> list[float]:
    """The verifier's score of every record's prompt + completion, as the ``scorer`` reward
    term computes it (a classifier's P(label 1)), on at most ``max_length`` tokens (0: the
    length it was trained on, from its ``verifier.json``, else 512)."""
    if not max_length:
        summary = Path(verifier) / "verifier.json"
        trained = json.loads(summary.read_text()).get("max_length") if summary.is_file() else 0
        max_length = trained or 512
    # lazy: the scorer loads torch (seconds); --help, user errors and runs without --rerank
    # answer without it
    from actor.scorer import RewardScorer

    scorer = RewardScorer(verifier, ScorerOptions(path=verifier, max_length=max_length))
    prompts = {p.problem_id: p.prompt for p in problems}
    return scorer.score(
        [prompts[r["task_id"]] for r in records], [r["completion"] for r in records]
    )


def run_evaluation(args: argparse.Namespace, worker=None) -> dict:
    """The command: load, render, generate, score, write; returns the summary.

    ``worker`` reuses a started rollout worker of the same model (its sampling settings are
    replaced by the evaluation's), which saves an engine start when evaluating several sets.
    """
    started = time.perf_counter()
    # before the generation: the results are written at the end, and must have a place
    check_output_dir(args.out, "--out", args.overwrite, results=RESULTS)
    with contextlib.suppress(OSError):  # the log is a help; the results' place was checked
        Path(args.out).mkdir(parents=True, exist_ok=True)
        console.log_to(Path(args.out) / LOG_FILE)
    _say_run_settings(args)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args.model = locate_model(args.model, "--model")
    if args.rerank:  # before the generation, not after it
        args.rerank = locate_model(args.rerank, "--rerank")
    worker_tokenizer = load_tokenizer(args.model)
    problems = load_rendered(
        args.problems, args.split, args.format, args.template, worker_tokenizer, args.limit
    )
    if not problems:
        raise EvalError(f"{args.problems}: no problems in split {args.split!r}")
    max_len = args.max_model_len = args.max_model_len or default_max_model_len(args.model)
    _check_lengths(problems, worker_tokenizer, args.max_new_tokens, max_len)
    _stderr(f"evaluating {args.model} on {len(problems)} problems x {args.n} samples")
    sandbox_config = SandboxConfig(
        num_workers=args.workers,
        timeout_s=args.timeout_s,
        test_timeout_s=args.test_timeout_s,
        min_isolation=args.min_isolation,
    )
    if worker is None:
        worker = build_worker(args, max_len)
    else:
        worker.config = rollout_config(args)
    with SandboxPool(sandbox_config) as pool:
        records = sample_and_score(
            problems,
            worker_tokenizer,
            worker.generate,
            lambda jobs: pool.run(jobs),  # every test: pass@k per test group
            n=args.n,
            seed=args.seed,
            progress=_stderr,
        )
    summary = _summary(args, records, len(problems), time.perf_counter() - started)
    if args.rerank:
        scores = verifier_scores(args.rerank, problems, records, args.rerank_max_length)
        for record, score in zip(records, scores, strict=True):
            record["verifier_score"] = score
        summary["rerank"] = args.rerank
        summary["reranked_pass@1"] = _finite(rerank(records, scores, args.n))
    _write(Path(args.out), records, summary)
    return summary


def load_tokenizer(model_path: str):
    from transformers import AutoTokenizer  # lazy: seconds to import, not needed for --help

    return AutoTokenizer.from_pretrained(model_path)


def _summary(args: argparse.Namespace, records: list[dict], num_problems: int, seconds: float):
    metrics = summarize(records, args.k)
    return {
        "model": args.model,
        "problems": args.problems,
        "split": args.split,
        "format": args.format,
        "template": args.template,
        "num_problems": num_problems,
        "n": args.n,
        "k": args.k,
        "temperature": args.temperature,
        "max_new_tokens": args.max_new_tokens,
        "stop": args.stop,
        "max_model_len": args.max_model_len,
        "dtype": args.dtype,
        "timeout_s": args.timeout_s,
        "test_timeout_s": args.test_timeout_s,
        "seed": args.seed,
        "run_config": args.run_config,
        **{f"pass@{k}": _finite(metrics[f"eval/pass@{k}"]) for k in args.k},
        "groups": group_summary(metrics),
        "kinds": group_summary(metrics, "kind"),
        "difficulties": group_summary(metrics, "difficulty"),
        "verdicts": dict(Counter(r["verdict"] for r in records)),
        "infra_error_frac": metrics["eval/infra_error_frac"],
        "seconds": round(seconds, 2),
    }


def _finite(value: float) -> float | None:
    return None if math.isnan(value) else value


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def _write(out: Path, records: list[dict], summary: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    lines = "".join(json.dumps(r) + "\n" for r in records)
    (out / RESULTS[0]).write_text(lines, encoding="utf-8")
    (out / RESULTS[1]).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        formatter_class=DefaultsHelpFormatter, prog="python -m launch.evaluate", description=__doc__
    )
    add = parser.add_argument
    add(
        "--model",
        required=True,
        help="HF model directory (or hub name when online); a training run's checkpoint, or "
        "its directory for the latest one, also gives the settings marked 'the run's'",
    )
    _add_generation_flags(add)
    add(
        "--limit",
        type=non_negative_int,
        default=0,
        help="evaluate only the first N problems of the split; 0: all",
    )
    add("--out", default="runs/eval", help="directory for samples.jsonl and summary.json")
    add(
        "--overwrite",
        action="store_true",
        help="write over an --out directory that already holds files (an earlier evaluation)",
    )
    add("--kv-cache-gib", type=positive_float, default=2.0)
    _add_scoring_flags(add)
    args = parser.parse_args(argv)
    try:
        apply_run_settings(args)
    except ConfigError as exc:
        parser.exit(2, f"error: {exc}\n")
    if args.problems is None:
        parser.error("--problems is required unless --model is a training run's checkpoint")
    args.stop = [stop for stop in args.stop if stop]  # --stop '': none
    if not args.temperature >= 0:  # `not >=`: NaN too
        parser.error(f"argument --temperature: must be 0 or more, got {args.temperature}")
    if args.k is None:
        args.k = sorted({k for k in (1, 10) if k <= args.n} | ({args.n} if args.rerank else set()))
    if max(args.k) > args.n:
        parser.error(f"--k {max(args.k)} needs at least that many samples: raise --n")
    return args


def _run_help(dest: str, text: str = "", default: str = "") -> str:
    """Help of a flag whose default a training run gives (:data:`RUN_SETTINGS`)."""
    field, value = RUN_SETTINGS[dest]
    return f"{text}{'; ' if text else ''}default: the run's {field}, else {default or value}"


def _add_generation_flags(add) -> None:
    """What is evaluated, and how it is sampled: the flags a training run's config can give."""
    add(
        "--problems",
        help=_run_help(
            "problems", "problems file (MBPP, HumanEval, generic) or HF name", "required"
        ),
    )
    add("--split", help=_run_help("split", "e.g. test, train, validation, prompt", "all rows"))
    add("--format", choices=FORMATS, help=_run_help("format"))
    add(
        "--template",
        choices=["auto", "chat", "plain"],
        help=_run_help("template", "prompt template"),
    )
    add("--n", type=positive_int, default=10, help="samples per problem")
    add(
        "--k",
        type=parse_ks,
        default=None,
        help="comma-separated k values, e.g. 1,10; default: those of 1,10 that --n allows, "
        "and --n itself with --rerank (pass@n is the most a reranker can reach)",
    )
    add("--temperature", type=float, help=_run_help("temperature", "0 for greedy decoding"))
    add("--max-new-tokens", type=positive_int, help=_run_help("max_new_tokens"))
    add(
        "--stop",
        action="append",
        help=_run_help("stop", "stop string (repeatable; replaces the run's; '': none)", "none"),
    )
    add("--seed", type=int, help=_run_help("seed"))
    add("--dtype", choices=["bfloat16", "float16", "float32"], help=_run_help("dtype"))
    add(
        "--max-model-len",
        type=non_negative_int,
        help=_run_help("max_model_len", "context length; 0: the model's, <= 4096"),
    )


def _add_scoring_flags(add) -> None:
    """The flags of the sandbox that runs the samples and of the verifier that reranks them."""
    add("--workers", type=positive_int, default=2, help="sandbox workers")
    add(
        "--timeout-s",
        type=positive_float,
        help=_run_help(
            "timeout_s",
            "wall-clock limit per completion and per test (the run's: "
            "sandbox.test_timeout_s per test)",
        ),
    )
    add(
        "--min-isolation",
        choices=ISOLATION_LEVELS,
        default=ISOLATION_LEVELS[0],
        help=MIN_ISOLATION_HELP,
    )
    add(
        "--rerank",
        help="a verifier (launch.verifier.train): also report the pass@1 of the "
        "sample it ranks first per problem (over the problems pass@n counts)",
    )
    add(
        "--rerank-max-length",
        type=non_negative_int,
        default=0,
        help="verifier tokens, cut from the left; 0: what it was trained on (else 512)",
    )


#: The evaluation's own printed lines, which its console shows beside the project's logging.
CONSOLE_LINES = re.compile(
    r"(settings from |evaluating |\d+/\d+ problems, |\d+ problems x \d+ samples: |wrote )"
)
#: Every line of an evaluation's output (vLLM's and the sandbox's included), in ``--out``.
LOG_FILE = "evaluate.log"


def main(argv: list[str] | None = None, worker=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if argv is None:  # a person reads it: the evaluation's lines; every line in --out
        console.start(extra=CONSOLE_LINES)
    try:
        summary = run_evaluation(args, worker)
    except (
        ConfigError,
        DatasetError,
        OutputPathError,
        PromptError,
        EvalError,
        SandboxIsolationError,
    ) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    scores = "  ".join(f"pass@{k} {_fmt(summary[f'pass@{k}'])}" for k in args.k)
    if args.rerank:
        scores += f"  reranked pass@1 {_fmt(summary['reranked_pass@1'])}"
    print(f"{summary['num_problems']} problems x {args.n} samples: {scores}")
    for title, key in (("tests", "groups"), ("kind", "kinds"), ("difficulty", "difficulties")):
        for group, by_k in summary[key].items():  # test groups: stdin/stdout problems only
            scores = "  ".join(f"{name} {_fmt(v)}" for name, v in by_k.items())
            print(f"  {title} {group}: {scores}")
    print(f"wrote {Path(args.out) / 'samples.jsonl'} and {Path(args.out) / 'summary.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
