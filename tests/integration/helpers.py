"""Running short training jobs (or single actors) from tests, and acting on them while they run."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from common.config import Config, load_config

REPO = Path(__file__).resolve().parents[2]
# The length of the session's straight run (the ``straight_run`` fixture in conftest.py).
STRAIGHT_STEPS = 8


def short_config(out: Path, name: str, model_path: str, steps: int, *extra: str) -> Config:
    """The demo config, shrunk: few steps, a small batch, fractional CPUs so actors fit 2 cores;
    and partial credit, so the random model's first steps already have groups whose rewards
    differ, and train (the demo's exact-answer reward ties nearly every group of those steps at
    0, so the policy, and its KL to the reference, would hardly move); a constant lr, since the
    demo's decay to 0 over a few steps would leave the last ones barely training."""
    overrides = [
        "--run.output_dir", str(out),
        "--run.name", name,
        "--run.steps", str(steps),
        "--run.plot", "false",
        "--model.path", model_path,
        "--rollout.batch_size", "32",
        "--rollout.num_cpus", "0.5",
        "--rollout.kv_cache_gib", "0.1",
        "--reward.terms.execution.options.mode", "partial",
        "--learner.lr_schedule", "constant",
        *extra,
    ]  # fmt: skip
    return load_config(REPO / "configs" / "demo.toml", overrides)


def steps_written(run_dir: Path) -> int:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return 0
    return sum(1 for line in path.read_text().splitlines() if line.strip())


@contextlib.contextmanager
def before_steps(actions: dict[int, Callable[[Any], None]]) -> Iterator[None]:
    """Within the block, ``actions[n](driver)`` runs in the driver's own thread just before step
    n starts (before its control-file poll): a fault or a resize lands at the step the test
    chose, never raced against a run that may already be further along."""
    import pytest

    from launch.loop.driver import Driver

    step = Driver.step

    def step_after_action(driver: Driver, number: int) -> dict[str, float]:
        if number in actions:
            actions[number](driver)
        return step(driver, number)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Driver, "step", step_after_action)
        yield


def taken_back(fleet, index: int, wait_s: float = 600.0) -> None:
    """Until the rollout fleet's own check (each generation's) has taken left-out engine
    ``index`` back, which it does once Ray has restarted it."""
    deadline = time.monotonic() + wait_s
    while index not in fleet.live():
        assert time.monotonic() < deadline, f"engine {index} not back within {wait_s:g} s"
        fleet.check()
        time.sleep(0.5)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@contextlib.contextmanager
def private_ray(num_cpus: int = 2) -> Iterator[None]:
    """A private local Ray cluster for the block, unless this process is already connected
    ("auto" could join, and be stopped with, another run's cluster)."""
    import ray

    from launch.fleet.cluster import ACTOR_ENV, PROJECT_ROOT

    started_here = not ray.is_initialized()
    if started_here:
        ray.init(
            address="local",
            num_cpus=num_cpus,
            include_dashboard=False,
            runtime_env={"env_vars": {"PYTHONPATH": str(PROJECT_ROOT), **ACTOR_ENV}},
        )
    try:
        yield
    finally:
        if started_here:
            ray.shutdown()


def kill_for_good(actor) -> None:
    """``ray.kill`` without restart, returning once calls to the actor fail: the kill is
    asynchronous, so the old process may still answer a call or two."""
    import ray

    ray.kill(actor, no_restart=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            ray.get(actor.__ray_ready__.remote(), timeout=60)
        except ray.exceptions.RayActorError:
            return
        time.sleep(0.1)
    raise AssertionError("the killed actor still answers")


def crash_and_wait(actor, probe: Callable[[Any], Any]) -> tuple[Any, Any]:
    """Kill ``actor`` as a crash would (Ray restarts it) and wait for its new process, told
    apart by ``probe(actor)`` (an ObjectRef) answering differently than before the kill: the
    kill is asynchronous, so the old process may still answer a call or two. Returns the
    answers (before, after)."""
    import ray

    before = ray.get(probe(actor))
    ray.kill(actor, no_restart=False)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            after = ray.get(probe(actor), timeout=120)
            if after != before:
                return before, after
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
            pass
        time.sleep(0.2)
    raise AssertionError("the killed actor was not restarted")


def token_count_reward(batch: list) -> list[float]:
    """A reward term that is never uniform within a group for long: the completion's length.
    For runs that must learn something from the first step, whatever the policy writes."""
    return [float(item.num_tokens) for item in batch]


def masking_reward(batch: list) -> list[None]:
    """A reward term that masks every completion, as a broken sandbox pool's infra errors do:
    a step with it trains on nothing."""
    return [None] * len(batch)


def run_module(module: str, args: list[str], cwd: Path, log: Path, status: int = 0) -> None:
    """``python -m module args`` as a user types it; fails with the tail of its output unless
    it exits with ``status``."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = str(REPO)
    with log.open("w") as out:
        result = subprocess.run(
            [sys.executable, "-m", module, *args],
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=600,
        )
    if result.returncode != status:
        tail = "\n".join(log.read_text().splitlines()[-40:])
        pytest.fail(f"python -m {module} exited {result.returncode}:\n{tail}")


def check_a_short_run_judges_every_problem(config: str, source: Path, model: Path, out: Path):
    """Two steps of 16 completions on ``source`` with ``model`` (the tiny one with an 8k
    context), through ``python -m launch.train --config CONFIG``: every rollout row has its
    problem's number of tests, no infra_error, and no random program solves a problem."""
    from collections import Counter

    from common.datasets import load_dataset

    args = ["--config", config, "--overwrite", "--run.output_dir", str(out)]
    args += ["--model.path", str(model), "--model.max_model_len", "8192"]
    args += ["--data.source", str(source), "--data.split", "all", "--run.steps", "2"]
    args += ["--rollout.batch_size", "16", "--rollout.max_new_tokens", "32", "--rollout.stop", "[]"]
    run_module("launch.train", args, REPO, out / "console.log")
    run_dir = out / Path(config).stem
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert len(metrics) == 2 and all("reward/mean" in m for m in metrics)
    rows = [row for path in (run_dir / "rollouts").glob("*.jsonl") for row in read_jsonl(path)]
    tests = {p.problem_id: p.num_tests for p in load_dataset(source, "all")}
    assert len(rows) == 32
    for row in rows:
        assert row["tests_total"] == tests[row["problem_id"]]
        assert row["verdict"] != "infra_error"
    assert Counter(row["reward"] for row in rows)[0.0] == len(rows)  # none solved at random


def evaluate_a_few(source: Path, model: Path, limit: int, out: Path) -> dict:
    """``python -m launch.evaluate`` on ``source``'s first ``limit`` problems, 2 samples each,
    pass@1 and pass@2, with the 8k tiny ``model``: its summary (the log is ``out/eval.log``)."""
    args = ["--model", str(model), "--problems", str(source), "--split", "all"]
    args += ["--limit", str(limit), "--n", "2", "--k", "1,2", "--max-new-tokens", "16"]
    args += ["--max-model-len", "8192", "--out", str(out / "eval")]
    run_module("launch.evaluate", args, REPO, out / "eval.log")
    return json.loads((out / "eval" / "summary.json").read_text())
