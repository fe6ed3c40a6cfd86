"""A process verifier from Monte Carlo step labels, through a real vLLM engine (the policy
continues every prefix) and the real sandbox (every continuation is executed)."""

from __future__ import annotations

import json

import pytest

from launch.data.tasks import synthetic_problem
from launch.loop.rollouts import RolloutWriter

pytestmark = pytest.mark.integration


def _row(target: int, completion: str, passed: bool) -> dict:
    problem = synthetic_problem(target)
    return {
        "step": 1, "problem_id": problem.problem_id, "prompt": problem.prompt,
        "completion": completion, "verdict": "passed" if passed else "failed",
        "tests_passed": 4 if passed else 0, "tests_total": 4,
    }  # fmt: skip


def test_process_verifier_labels_steps_through_the_engine_and_sandbox(
    tiny_model_path, tmp_path, capsys
):
    from actor.scorer import RewardScorer
    from common.config import ScorerOptions
    from launch.verifier.train import main

    rows = []
    for target in range(6):  # two steps each: the answer, then a line of dead code
        rows.append(_row(target, f"{target}\n    x = 1\n", True))
        rows.append(_row(target, f"{target + 1}\n    x = 1\n", False))
    RolloutWriter(tmp_path / "rollouts").write(1, rows)
    out = tmp_path / "verifier"
    argv = [
        "--kind", "process", "--rollouts", str(tmp_path / "rollouts"),
        "--model", tiny_model_path, "--problems", "synthetic", "--out", str(out),
        "--mc-programs", "8", "--mc-samples", "3", "--max-new-tokens", "4", "--stop", "\n",
        "--max-model-len", "128", "--kv-cache-gib", "0.1", "--epochs", "1", "--max-length", "32",
        "--held-out", "0.34",
    ]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "labelling the steps of 8 programs, 3 continuations per prefix" in printed
    assert "16 step prefixes" in printed  # 8 programs x 2 steps
    summary = json.loads((out / "verifier.json").read_text())
    assert summary["kind"] == "process" and summary["step_split"] == "line"
    assert not set(summary["train_problems"]) & set(summary["held_out_problems"])
    options = ScorerOptions(path=str(out), max_length=32, step_split="line")
    scorer = RewardScorer(str(out), options)
    prompt = synthetic_problem(2).prompt
    scores = scorer.score([prompt, prompt], ["2\n    x = 1\n", "5\n"])
    assert all(0.0 <= s <= 1.0 for s in scores)
