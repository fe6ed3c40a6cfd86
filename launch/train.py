"""Entry point: ``python -m launch.train --config FILE [--section.key value ...]``.

Works unchanged under ``ray job submit --working-dir . -- python -m launch.train ...``: it joins
the running cluster when there is one and starts a local one otherwise. The configuration is
validated before any actor starts; the resolved configuration is saved in the run directory.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

from common.arguments import OutputPathError, check_output_dir
from common.config import Config, ConfigError, load_config
from common.datasets import DatasetError
from common.durable import (
    JsonlError,
    LockHeld,
    atomic_write_text,
    exclusive_lock,
    read_jsonl,
    rewrite_jsonl,
)
from common.help_format import DefaultsHelpFormatter
from common.memory.plan import check_memory_plan
from common.prompts import PromptError
from common.types import Problem
from launch import console
from launch.data.model_source import first_line, locate_model, model_tokenizer
from launch.data.problems import RunProblems, encode_prompts, load_eval_problems, load_problems
from launch.data.tiny_model import build_tiny_model
from launch.loop.checkpoint import (
    CHECKPOINTS,
    LATEST,
    DriverState,
    clear_checkpoints,
    load_driver_state,
    resume_checkpoint,
)
from launch.loop.masked_steps import MaskedStepsError
from launch.loop.metrics import summary
from launch.loop.plot import plot_rewards

logger = logging.getLogger("launch.train")
#: The run directory's lock (see :func:`run_lock`).
LOCK_FILE = "run.lock"


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        formatter_class=DefaultsHelpFormatter,
        prog="python -m launch.train",
        description="Train a code LLM with GRPO from execution rewards.",
        epilog="Any --section.key VALUE pair overrides the config file, e.g. --run.steps 50",
    )
    parser.add_argument("--config", help="TOML config file, e.g. configs/demo.toml")
    parser.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="continue the run in RUN_DIR from its last checkpoint (its config.toml is the base)",
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="start again in a run directory that exists"
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help=f"show every line of output (Ray's, vLLM's, ...), not only the run's own; all "
        f"of them are in the run directory's {console.LOG_FILE} either way",
    )
    return parser.parse_known_args(argv)


def resolve_model(config: Config) -> str:
    """A local model directory for ``model.path``, which every actor gets (they run offline):
    ``builtin:tiny`` is built offline once; a hub name is its snapshot in the local cache, or
    is downloaded once by the driver (hub on) to ``run.output_dir/_models/hub/<owner>--<name>``,
    which every node of a cluster reads (docs/cluster.md)."""
    models = Path(config.run.output_dir) / "_models"
    if config.model.path == "builtin:tiny":
        try:
            return str(build_tiny_model(models / "tiny").resolve())
        except OSError as exc:  # a pseudo file system (/proc, /sys), a full disk
            raise ConfigError(f"run.output_dir: cannot build {models / 'tiny'}: {exc}") from None
    return locate_model(config.model.path, download_dir=(models / "hub").resolve())


def check_scorers(config: Config) -> None:
    """Each learned scorer's model (``reward.terms.<name>.options.path``) checked as
    ``model.path`` is, before its actor would fail on it; the built-in ones are built later."""
    for name, options in config.reward.scorer_terms().items():
        if options.path.startswith("builtin:"):
            continue
        field = f"reward.terms.{name}.options.path"
        local = locate_model(options.path, field)
        if Path(local).is_dir():  # else a hub name its actor loads from the cache
            model_tokenizer(local, field)


def prepare_run_dir(config: Config, overwrite: bool) -> Path:
    """A fresh run directory with the resolved config; never silently clobbers a finished run."""
    run_dir = config.run_dir
    held = [name for name in ("metrics.jsonl", CHECKPOINTS, LATEST) if (run_dir / name).exists()]
    if held and not overwrite:
        raise ConfigError(
            f"{run_dir} already holds a run ({held[0]}): continue it with --resume {run_dir}, "
            "or start again with --overwrite"
        )
    for stale in ("metrics.jsonl", "batches.jsonl", "control.json"):
        (run_dir / stale).unlink(missing_ok=True)
    for stale in ("rollouts", "adapters"):  # a new run's records must not mix with the old's
        shutil.rmtree(run_dir / stale, ignore_errors=True)
    clear_checkpoints(run_dir)  # a resume must never find the old run's steps
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(run_dir / "config.toml", config.to_toml())
    return run_dir


def _truncate_jsonl(path: Path, last_step: int) -> None:
    """Drop records written after the checkpoint we resume from (they will be redone), and a
    last line cut by the crash; rewritten atomically, so a crash now loses nothing."""
    if not path.exists():
        return
    rows = read_jsonl(path)
    for number, row in enumerate(rows, 1):
        if not isinstance(row, dict) or not isinstance(row.get("step"), int):
            raise JsonlError(f"{path}: row {number} has no integer 'step': not this run's record")
    rewrite_jsonl(path, [row for row in rows if row["step"] <= last_step])


@contextlib.contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """The run directory for this process alone, for the whole run: a second run there would
    interleave its steps and checkpoints with this one's. Held by the driver only (the learner
    and the other actors write where the driver tells them); released when the process ends,
    however it ends."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"run.output_dir: cannot create {run_dir}: {exc.strerror}") from None
    holder = f"pid {os.getpid()} on {socket.gethostname()} (python -m launch.train)"
    try:
        with exclusive_lock(run_dir / LOCK_FILE, holder):
            yield
    except LockHeld as exc:
        raise ConfigError(
            f"{run_dir} is in use by another run ({exc}): wait for it to end or stop it first"
        ) from None


class RunAborted(RuntimeError):
    """An actor of the run died beyond recovery (the learner, whose state lives only in its
    process, or a service that failed every retry), or ``run.max_masked_steps`` steps in a row
    had nothing to train on; the message says how to resume."""


def _actor_names(error: Exception) -> list[str]:
    """The names of the actors Ray's error text is about (its ``name:`` lines)."""
    lines = str(error).splitlines()
    return [line.split(":", 1)[1].strip() for line in lines if "\tname:" in line]


def _aborted(error: Exception, run_dir: Path) -> RunAborted:
    """Name the actor that died and the step to resume at."""
    from launch.fleet.weight_sync import LearnerTransmitError  # lazy: Ray and torch, as in _run

    names = _actor_names(error)
    actor = names[0] if names else "an actor"
    if isinstance(error, LearnerTransmitError):
        actor = "the learner's weight broadcast failed, and the learner"
    cause = first_line(error)
    try:
        resume = (
            f"the last checkpoint is at step {load_driver_state(run_dir).step}: continue with\n"
            f"  python -m launch.train --resume {run_dir}"
        )
    except FileNotFoundError:
        resume = "no checkpoint was written before it: start the run again"
    return RunAborted(f"{actor} died and could not be recovered ({cause}); {resume}")


def _restart_learner(error: Exception, config: Config, fleet, model_path: str, run_dir: Path):
    """After a learner rank died, or the learner's weight broadcast failed on its own
    (``LearnerTransmitError``): the learner again from the last checkpoint, and the driver
    state to continue from (the steps after the checkpoint are redone, as on --resume).
    Raises ``error`` again when it was not the learner, when ``learner.max_restarts`` are
    used up, or when there is no checkpoint to restart from."""
    # lazy: Ray and torch, as in _run
    from launch.fleet.actors import learner_name
    from launch.fleet.weight_sync import LearnerTransmitError

    run_id = config.run.name
    names = {learner_name(run_id, rank) for rank in range(config.learner.num_ranks)}
    dead = set(_actor_names(error))
    if isinstance(error, LearnerTransmitError):
        dead = names  # alive, but out of step with the engines: every rank is replaced
    restarts = fleet.counters["faults/learner_restarts"]
    if not dead & names or restarts >= config.learner.max_restarts:
        raise error
    try:
        found = resume_checkpoint(run_dir)
    except FileNotFoundError:
        raise error from None
    state = found.state
    logger.warning(
        "%s died (%s): restarting the learner from the checkpoint at step %d (restart %d of %d)",
        ", ".join(sorted(dead & names)),
        first_line(error),
        state.step,
        restarts + 1,
        config.learner.max_restarts,
    )
    for name in ("metrics.jsonl", "batches.jsonl"):
        _truncate_jsonl(run_dir / name, state.step)
    fleet.restart_learner(config, model_path, run_id, str(found.path.resolve()))
    return state


def train(config: Config, resume: bool = False, overwrite: bool = False) -> Path:
    """Run a whole training job (or continue one); returns the run directory."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:  # a file on its path, a read-only place: refused before anything is built there
        check_output_dir(config.run_dir, "run.output_dir", overwrite=True)
    except OutputPathError as exc:
        raise ConfigError(str(exc)) from None
    # The model and the problems first: a mistake in either leaves no run directory behind.
    model_path = resolve_model(config)
    check_memory_plan(config, model_path)  # GPU runs: what each card will hold, or a refusal
    tokenizer = model_tokenizer(model_path)
    check_scorers(config)
    problems = load_problems(config.data, tokenizer)
    checked = check_problems(config, tokenizer, problems)
    if config.selfplay.saboteur and not any(p.reference_solution.strip() for p in problems):
        raise ConfigError(
            f"selfplay.saboteur: no problem of {config.data.source} has a reference solution, "
            "so there is no correct program to break"
        )
    with run_lock(config.run_dir):  # before anything in the run directory changes
        return _run(config, model_path, tokenizer, checked, resume, overwrite)


def check_problems(config: Config, tokenizer, problems: list[Problem]) -> RunProblems:
    """The run's problems, refused before anything starts where the run would otherwise fail
    minutes in, after the engines are up: no problem to train (or, with ``eval.every``, to
    evaluate) on, or a prompt the engines refuse (``model.max_model_len`` tokens or more);
    prompts that leave less than ``rollout.max_new_tokens`` are warned of."""
    data, ev = config.data, config.eval
    prompt_ids = encode_prompts(problems, tokenizer)
    held_out = load_eval_problems(config, tokenizer) if ev.every else []
    sets = {"data": (data.source, data.split, problems, prompt_ids)}
    if ev.every:
        eval_ids = encode_prompts(held_out, tokenizer)
        sets["eval"] = (ev.source or data.source, ev.split, held_out, eval_ids)
    new, context = config.rollout.max_new_tokens, config.model.max_model_len
    for section, (source, split, chosen, ids) in sets.items():
        if not chosen:
            raise ConfigError(
                f"{section}.source / {section}.split: {source} has no problem in split {split!r}"
            )
        lengths = [len(prompt) for prompt in ids]
        longest = max(lengths)
        problem_id = chosen[lengths.index(longest)].problem_id
        refused = sum(length >= context for length in lengths)
        if refused:
            raise ConfigError(
                f"{section}.source: {refused} of {len(chosen)} prompts of {source} are "
                f"model.max_model_len ({context}) tokens or longer, which the engines refuse; the "
                f"longest {longest} (problem {problem_id}): give model.max_model_len >= "
                f"{longest + new}"
            )
        if short := sum(length + new > context for length in lengths):
            logger.warning(
                "%s.source: %d of %d prompts of %s leave less than rollout.max_new_tokens (%d) "
                "in model.max_model_len (%d): their completions end at the context (the longest "
                "prompt, problem %s, %d tokens)",
                section, short, len(chosen), source, new, context, problem_id, longest,
            )  # fmt: skip
    return RunProblems(problems, prompt_ids, held_out)


def _resumed(config: Config) -> tuple[DriverState, str]:
    """The state and checkpoint a resume starts from, its records cut back to that step."""
    run_dir = config.run_dir
    found = resume_checkpoint(run_dir)
    sharded = (found.path / "optimizer").is_dir()
    if sharded != (config.learner.num_ranks > 1):
        written = "several learner ranks" if sharded else "one learner rank"
        raise ConfigError(
            f"learner.num_ranks: the checkpoint in {run_dir} was written by {written}; "
            f"resume it with the learner.num_ranks it was trained with"
        )
    for name in ("metrics.jsonl", "batches.jsonl"):
        _truncate_jsonl(run_dir / name, found.state.step)
    return found.state, str(found.path.resolve())


def _run(
    config: Config,
    model_path: str,
    tokenizer,
    problems: RunProblems,
    resume: bool,
    overwrite: bool,
) -> Path:
    """:func:`train` once the run directory is locked."""
    # lazy: Ray and torch (under the fleet and the driver) take seconds to import;
    # --help and config errors answer before any of them loads
    import ray

    from launch.fleet.cluster import checked_address, connect
    from launch.fleet.fleet import start_fleet
    from launch.fleet.weight_sync import LearnerTransmitError
    from launch.loop.driver import Driver

    if not ray.is_initialized():  # a bad address refused before the run directory changes
        checked_address(config.ray)
    state = checkpoint = None
    if resume:
        run_dir = config.run_dir
        state, checkpoint = _resumed(config)
    else:
        run_dir = prepare_run_dir(config, overwrite)
    console.log_to(run_dir / console.LOG_FILE, append=resume)
    connect(config.ray, config.requested_cpus)
    logger.info(
        "starting %d rollout worker(s), the learner and a sandbox pool of %d worker(s)",
        config.rollout.num_actors,
        config.sandbox.num_workers,
    )
    fleet = start_fleet(config, model_path, run_id=config.run.name, resume_from=checkpoint)
    if resume:  # the overrides it resumed with, once they started a fleet (not a bad address)
        atomic_write_text(run_dir / "config.toml", config.to_toml())
    logger.info("sandbox: %s", fleet.sandbox.describe())
    try:
        while True:
            if state is not None:
                fleet.rollout.push(fleet.learner.export_weights())
                logger.info("resumed %s at step %d", run_dir, state.step)
            try:
                Driver(config, fleet, problems, tokenizer, run_dir, state).run()
                break
            except (ray.exceptions.RayActorError, LearnerTransmitError) as exc:
                state = _restart_learner(exc, config, fleet, model_path, run_dir)
    except (ray.exceptions.RayActorError, LearnerTransmitError) as exc:
        raise _aborted(exc, run_dir) from exc
    except MaskedStepsError as exc:
        raise RunAborted(str(exc)) from exc
    finally:
        fleet.shutdown()
    if config.run.plot:
        plot_rewards(run_dir / "metrics.jsonl", run_dir / "reward_curve.png")
    logger.info("run finished: %s", finished(run_dir, config.run.plot))
    return run_dir


def finished(run_dir: Path, plotted: bool) -> str:
    """What the run did and where its results are, for its last line: ``300 steps, reward 0.93
    and pass rate 0.88 over the last 10 steps; curve runs/demo/reward_curve.png, checkpoint
    runs/demo/checkpoint``."""
    results = [f"curve {run_dir / 'reward_curve.png'}"] if plotted else []
    if (run_dir / LATEST).exists():
        results.append(f"checkpoint {run_dir / LATEST}")
    done = summary(run_dir / "metrics.jsonl")
    return f"{done}; {', '.join(results)}" if results else done


def load_run_config(args: argparse.Namespace, overrides: list[str]) -> Config:
    """The config of a new run, or of the run being resumed (its saved config plus overrides)."""
    if args.resume:
        if args.config:
            raise ConfigError("--resume uses the run's own config.toml; drop --config")
        saved = Path(args.resume) / "config.toml"
        if not saved.is_file():
            raise ConfigError(f"{args.resume} is not a run directory ({saved} is missing)")
        fixed = sorted({"--run.name", "--run.output_dir"} & set(overrides[::2]))
        if fixed:
            raise ConfigError(f"--resume: {fixed[0]} is the run directory's own; drop it")
        config = load_config(saved, overrides)
        # where the run is now: it may have been moved or copied since it was saved
        run_dir = Path(os.path.abspath(args.resume))
        try:
            config.run.output_dir, config.run.name = str(run_dir.parent), run_dir.name
        except ValueError:  # pydantic's, for a name it refuses ("/" itself)
            raise ConfigError(f"--resume: {args.resume} is not a run directory") from None
        return config
    if not args.config:  # the defaults alone train nothing a person would want: say so
        raise ConfigError(
            "--config: name a config file, e.g. --config configs/demo.toml (the demo that "
            "`make demo` runs); configs/ holds the shipped ones"
        )
    return load_config(args.config, overrides)


def main(argv: list[str] | None = None) -> int:
    # the console filter knows the project's lines by this format
    logging.basicConfig(level=logging.INFO, format=console.FORMAT)
    args, overrides = parse_args(sys.argv[1:] if argv is None else argv)
    if argv is None:  # a person reads it: the run's own lines (--verbose: all), all in its log
        console.start(show_all=args.verbose)
    try:
        config = load_run_config(args, overrides)
        train(config, resume=bool(args.resume), overwrite=args.overwrite)
    except (ConfigError, DatasetError, PromptError, FileNotFoundError, JsonlError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except RunAborted as exc:
        logger.debug("run aborted", exc_info=exc.__cause__)
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
