"""Self-play rounds aimed at the policy's weaknesses: ``python -m launch.selfplay``.

    python -m launch.selfplay --config FILE --rounds R [--steps-per-round K]
        [--repairs-per-problem B] [--overwrite] [--section.key value ...]

Round 0 evaluates the base model's pass@1 on the held-out problems. Then each round r:

1. **profile**: the policy samples ``eval.n`` completions of every training problem: per problem
   its pass rate, overall the verdict mix. When the held-out set is the training set (the
   synthetic demo), the previous round's evaluation is the profile;
2. **tasks**: repair tasks (``launch.selfplay.make_repairs``), up to ``--repairs-per-problem``
   per problem in proportion to how often the policy fails it;
3. **train**: ``--steps-per-round`` steps of ``launch.train`` in ``<run>/round-<r>/train`` from
   the policy's weights (optimiser state fresh) on the training problems plus the round's tasks,
   with the failure-focused curriculum;
4. **evaluate** the new checkpoint on the held-out problems, append the round to
   ``<run>/rounds.jsonl`` and redraw ``<run>/rounds.png``.

Every phase runs as the command a user would type, in a process of its own. Started again with
the same config it resumes at the next round; an interrupted round is done again from its start.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from common.config import Config, ConfigError, load_config
from common.datasets import DatasetError
from common.durable import JsonlError, append_jsonl, read_jsonl, repair_tail
from common.help_format import DefaultsHelpFormatter
from common.prompts import PromptError
from launch.data.problems import load_raw
from launch.data.tasks import SYNTHETIC_SOURCES
from launch.selfplay.make_repairs import make_repairs
from launch.selfplay.repairs import function_problems_only
from launch.train import resolve_model
from sandbox.trusted.pool import SandboxIsolationError, SandboxPool

logger = logging.getLogger("launch.selfplay")

ROUNDS_FILE = "rounds.jsonl"


class RoundFailed(RuntimeError):
    """A phase's command exited with an error; its log is named in the message."""


# ---- what a round computes -------------------------------------------------------------------


def weakness_profile(records: list[dict]) -> dict[str, Any]:
    """Pass rate per problem and the verdict mix, from ``launch.evaluate``'s sample records
    (samples the sandbox could not judge say nothing and are left out)."""
    judged = [r for r in records if r["verdict"] != "infra_error"]
    per_problem: dict[str, list[int]] = {}
    for record in judged:
        counts = per_problem.setdefault(record["task_id"], [0, 0])
        counts[0] += 1
        counts[1] += bool(record["passed"])
    verdicts = Counter(r["verdict"] for r in judged)
    return {
        "pass_rate": {task: passed / n for task, (n, passed) in sorted(per_problem.items())},
        "verdicts": {v: c / max(len(judged), 1) for v, c in sorted(verdicts.items())},
        "samples": len(judged),
    }


def repair_quota(pass_rate: dict[str, float], per_problem: int) -> dict[str, int]:
    """Bugs wanted per problem: ``per_problem`` times its failure rate, rounded up, so every
    problem the policy sometimes fails gets at least one and a solved one none."""
    return {
        task: math.ceil(per_problem * (1 - rate) - 1e-9)
        for task, rate in pass_rate.items()
        if rate < 1
    }


def problem_rows(problems, split: str = "train") -> list[dict]:
    """Problems as rows of the generic JSONL format (their task text, not a rendered prompt)."""
    return [
        {
            "id": p.problem_id,
            "prompt": p.prompt,
            "tests": list(p.tests),
            "setup_code": p.setup_code,
            "reference_solution": p.reference_solution,
            "program_prefix": p.program_prefix,
            "split": split,
        }
        for p in problems
    ]


def read_rounds(run_dir: Path) -> list[dict]:
    """The rounds done so far. A last line cut by a crash is a round not done: it is dropped
    from the file, so the next round's row starts a line of its own; a malformed line before
    the last is corruption (``JsonlError`` naming it)."""
    path = run_dir / ROUNDS_FILE
    if not path.is_file():
        return []
    repair_tail(path)
    return read_jsonl(path)


def plot_rounds(rounds: list[dict], out: Path) -> None:
    """pass@1 on the held-out problems per round (round 0: the base model)."""
    import matplotlib  # lazy: seconds to import, only for the plot at the end

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    judged = [r for r in rounds if r["pass@1"] is not None]
    ax.plot([r["round"] for r in judged], [r["pass@1"] for r in judged], marker="o")
    ax.set_xlabel("round")
    ax.set_ylabel("held-out pass@1")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


# ---- the phases, each the command a user would type -----------------------------------------


class SelfPlay:
    """Runs rounds for one config (see the module docstring)."""

    def __init__(self, config: Config, config_path: str, overrides: list[str], args) -> None:
        self.config = config
        self.config_path = config_path
        self.overrides = overrides
        self.args = args
        self.run_dir = config.run_dir

    @property
    def same_sets(self) -> bool:
        """The held-out problems are the training problems (the synthetic demo)."""
        data, ev = self.config.data, self.config.eval
        held_out = ev.source or data.source
        return held_out == data.source and (held_out in SYNTHETIC_SOURCES or ev.split == data.split)

    def run(self, rounds: int) -> list[dict]:
        done = read_rounds(self.run_dir)
        if not done:
            base, out = resolve_model(self.config), self.run_dir / "round-0" / "eval"
            summary, _ = self.evaluate(base, out, held_out=True)
            row = {"round": 0, "pass@1": summary["pass@1"], "checkpoint": base}
            done = [self._append({**row, "eval_records": str((out / "samples.jsonl").resolve())})]
        for number in range(len(done), rounds + 1):
            done.append(self._append(self.round(number, done[-1])))
        return done

    def round(self, number: int, previous: dict) -> dict:
        directory = self.run_dir / f"round-{number}"
        if directory.exists():
            logger.info("round %d was interrupted: doing it again", number)
            shutil.rmtree(directory)
        directory.mkdir(parents=True)
        policy = previous["checkpoint"]
        if self.same_sets and "eval_records" in previous:
            records = read_jsonl(Path(previous["eval_records"]))
        else:
            _, records = self.evaluate(policy, directory / "profile", held_out=False)
        profile = weakness_profile(records)
        quota = repair_quota(profile["pass_rate"], self.args.repairs_per_problem)
        rows, repairs = self.make_tasks(quota, number)
        problems = directory / "problems.jsonl"
        problems.write_text("".join(json.dumps(row) + "\n" for row in rows))
        checkpoint = self.train(policy, problems, directory / "train")
        summary, _ = self.evaluate(checkpoint, directory / "eval", held_out=True)
        return {
            "round": number,
            "pass@1": summary["pass@1"],
            "pass@1_before": previous["pass@1"],
            "profile": profile,
            "tasks": {
                "problems": len(rows) - len(repairs),
                "repairs": len(repairs),
                "repairs_by_operator": dict(Counter(row["operator"] for row in repairs)),
                "repairs_by_problem": dict(Counter(row["source_task_id"] for row in repairs)),
            },
            "checkpoint": checkpoint,
            "eval_records": str((directory / "eval" / "samples.jsonl").resolve()),
        }

    def _append(self, row: dict) -> dict:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        append_jsonl(self.run_dir / ROUNDS_FILE, [row])
        rounds = read_rounds(self.run_dir)
        plot_rounds(rounds, self.run_dir / "rounds.png")
        logger.info("round %d: held-out pass@1 %s", row["round"], _score(row["pass@1"]))
        return row

    def make_tasks(self, quota: dict[str, int], number: int) -> tuple[list[dict], list[dict]]:
        """(every row of the round's problem file, the repair tasks among them): the training
        problems plus repair tasks for the weak ones."""
        data = self.config.data
        problems = load_raw(data.source, data.split, data.format, data.max_problems)
        with SandboxPool(self.config.sandbox) as pool:
            repairs, _ = make_repairs(
                problems,
                lambda jobs, stop: pool.run(jobs, stop_at_first_failure=stop),
                self.args.repairs_per_problem,
                self.config.run.seed + number,
                quota=quota,
            )
        for row in repairs:
            row["split"] = "train"
        return problem_rows(problems) + repairs, repairs

    def _template(self, source: str) -> str:
        """The prompt template for a phase on ``source``: the synthetic tasks are completion
        prompts whatever the tokenizer (a round's problem file holds them as generic rows)."""
        return "plain" if source in SYNTHETIC_SOURCES else self.config.data.prompt_template

    def train(self, policy: str, problems: Path, run_dir: Path) -> str:
        """K steps from ``policy`` on ``problems``; returns the checkpoint's path."""
        args = [
            *(["--config", self.config_path] if self.config_path else []),
            *self.overrides,
            "--run.output_dir", str(run_dir.parent),
            "--run.name", run_dir.name,
            "--run.steps", str(self.args.steps_per_round),
            "--model.path", policy,
            "--data.source", str(problems),
            "--data.format", "generic",
            "--data.split", "train",
            "--data.max_problems", "0",
            "--data.prompt_template", self._template(self.config.data.source),
            "--data.curriculum", "failure_focused",
            "--eval.every", "0",
            "--overwrite",
        ]  # fmt: skip
        _command("launch.train", args, run_dir.parent / "train.log")
        return str((run_dir / "checkpoint").resolve())

    def evaluate(self, model: str, out: Path, held_out: bool) -> tuple[dict, list[dict]]:
        """``launch.evaluate`` of ``model`` on the held-out or the training problems."""
        config = self.config
        data, ev, rollout, sandbox = config.data, config.eval, config.rollout, config.sandbox
        source = (ev.source or data.source) if held_out else data.source
        split = ev.split if held_out else data.split
        limit = ev.max_problems if held_out else data.max_problems
        args = [
            "--model", model,
            "--problems", source,
            "--split", split,
            "--format", data.format,
            "--template", self._template(source),
            "--n", str(ev.n),
            "--k", "1",
            "--temperature", str(rollout.temperature),
            "--max-new-tokens", str(rollout.max_new_tokens),
            *[arg for stop in rollout.stop for arg in ("--stop", stop)],
            "--limit", str(limit),
            "--out", str(out),
            "--overwrite",  # the round's own directory: it holds evaluate.log, or a retried try
            "--seed", str(config.run.seed),
            "--dtype", config.model.dtype,
            "--max-model-len", str(config.model.max_model_len),
            "--kv-cache-gib", str(rollout.kv_cache_gib),
            "--workers", str(sandbox.num_workers),
            "--timeout-s", str(sandbox.timeout_s),
            "--min-isolation", sandbox.min_isolation,
        ]  # fmt: skip
        out.mkdir(parents=True, exist_ok=True)
        _command("launch.evaluate", args, out / "evaluate.log")
        summary = json.loads((out / "summary.json").read_text())
        records = read_jsonl(out / "samples.jsonl")
        return summary, records


def _score(value: float | None) -> str:
    """A pass@1 for people: n/a when no sample could be judged (every one an infra error)."""
    return "n/a" if value is None else f"{value:.4f}"


def _command(module: str, args: list[str], log: Path) -> None:
    """``python -m module args`` with its output in ``log``; a failure names the log."""
    log.parent.mkdir(parents=True, exist_ok=True)
    logger.info("python -m %s (log: %s)", module, log)
    with log.open("w") as out:
        code = subprocess.run(
            [sys.executable, "-m", module, *args], stdout=out, stderr=subprocess.STDOUT
        ).returncode
    if code:
        tail = "\n".join(log.read_text().splitlines()[-5:])
        raise RoundFailed(f"python -m {module} exited {code} (log: {log}):\n{tail}")


# ---- command line ----------------------------------------------------------------------------


def check_sources(config: Config) -> None:
    """Load the training and held-out problems once before any round: a missing file or a
    malformed row is a one-line error (exit 2), not a failed phase minutes later."""
    data, ev = config.data, config.eval
    training = load_raw(data.source, data.split, data.format, data.max_problems)
    held_out = load_raw(ev.source or data.source, ev.split, data.format, ev.max_problems)
    function_problems_only(training, data.source)  # its rounds write repair tasks
    if not training or not held_out:
        which = "data.source/data.split" if not training else "eval.source/eval.split"
        raise ConfigError(f"{which}: no problems to play rounds on")


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        formatter_class=DefaultsHelpFormatter,
        prog="python -m launch.selfplay",
        description="Rounds of evaluate, aim repair tasks at the weaknesses, train.",
        epilog="Any --section.key VALUE pair overrides the config file, for every round's run",
    )
    parser.add_argument("--config", help="TOML config file of each round's training run")
    parser.add_argument("--rounds", type=int, required=True, help="rounds in all (resumes)")
    parser.add_argument("--steps-per-round", type=int, default=50)
    parser.add_argument(
        "--repairs-per-problem", type=int, default=3, help="bugs for a problem always failed"
    )
    parser.add_argument("--overwrite", action="store_true", help="start again instead of resuming")
    args, overrides = parser.parse_known_args(argv)
    if args.rounds < 1 or args.steps_per_round < 1 or args.repairs_per_problem < 1:
        parser.error("--rounds, --steps-per-round and --repairs-per-problem must be at least 1")
    return args, overrides


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    args, overrides = parse_args(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        config = load_config(args.config, overrides)
        if config.learner.lora.enabled:
            raise ConfigError(
                "learner.lora: launch.selfplay starts each round from the last round's "
                "checkpoint as a whole model, and a LoRA checkpoint holds only the adapter"
            )
        check_sources(config)
        resolve_model(config)  # a bad model.path refused before --overwrite deletes anything
        if args.overwrite and config.run_dir.exists():
            shutil.rmtree(config.run_dir)
        rounds = SelfPlay(config, args.config or "", overrides, args).run(args.rounds)
    except (ConfigError, DatasetError, PromptError, SandboxIsolationError, JsonlError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except RoundFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for row in rounds:
        print(f"round {row['round']}: held-out pass@1 {_score(row['pass@1'])}")
    print(f"wrote {config.run_dir / ROUNDS_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
