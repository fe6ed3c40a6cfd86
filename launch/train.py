"""Entry point: ``python -m launch.train --config FILE [--section.key value ...]``.

Works unchanged under ``ray job submit --working-dir . -- python -m launch.train ...``: it joins
the running cluster when there is one and starts a local one otherwise. The configuration is
validated before any actor starts; the resolved configuration is saved in the run directory.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from common.config import Config, ConfigError, load_config

logger = logging.getLogger("launch.train")


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        prog="python -m launch.train",
        description="Train a code LLM with GRPO from execution rewards.",
        epilog="Any --section.key VALUE pair overrides the config file, e.g. --run.steps 50",
    )
    parser.add_argument("--config", help="TOML config file (defaults when omitted)")
    return parser.parse_known_args(argv)


def resolve_model(config: Config) -> str:
    """A local model directory for ``model.path``; ``builtin:tiny`` is built offline once."""
    if config.model.path == "builtin:tiny":
        from common.tiny_model import build_tiny_model

        return str(build_tiny_model(Path(config.run.output_dir) / "_models" / "tiny").resolve())
    return config.model.path


def prepare_run_dir(config: Config) -> Path:
    run_dir = config.run_dir
    if (run_dir / "metrics.jsonl").exists():
        (run_dir / "metrics.jsonl").unlink()
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.toml").write_text(config.to_toml())
    return run_dir


def train(config: Config) -> Path:
    """Run a whole training job; returns the run directory."""
    import ray
    from transformers import AutoTokenizer

    from common.data import load_problems
    from launch.cluster import connect, start_fleet
    from launch.driver import Driver
    from launch.plot import plot_rewards

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    problems = load_problems(config.data)
    run_dir = prepare_run_dir(config)
    model_path = resolve_model(config)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    connect(config.ray)
    logger.info(
        "starting %d rollout worker(s), the learner and the sandbox pool", config.rollout.num_actors
    )
    fleet = start_fleet(config, model_path, run_id=config.run.name)
    try:
        Driver(config, fleet, problems, tokenizer, run_dir).run()
    finally:
        fleet.shutdown()
    if config.run.plot:
        plot_rewards(run_dir / "metrics.jsonl", run_dir / "reward_curve.png")
    ray.shutdown()
    logger.info("run finished: %s", run_dir)
    return run_dir


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    args, overrides = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        config = load_config(args.config, overrides)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    train(config)
    return 0


if __name__ == "__main__":
    sys.exit(main())
