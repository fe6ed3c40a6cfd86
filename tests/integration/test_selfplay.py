"""``python -m launch.selfplay`` on the demo, as a user starts it: two rounds of profile, repair
tasks aimed at the weak problems, training and held-out evaluation, then a resume."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest

from tests.integration.helpers import REPO, read_jsonl, run_module

pytestmark = pytest.mark.integration


def test_two_rounds_then_an_interrupted_round_is_done_again(tmp_path, tiny_model_path):
    run_dir = tmp_path / "runs" / "selfplay"
    args = [
        "--config", str(REPO / "configs" / "demo.toml"),
        "--run.output_dir", str(run_dir.parent),
        "--run.name", "selfplay",
        "--run.plot", "false",
        "--model.path", tiny_model_path,
        "--model.max_model_len", "384",  # repair prompts hold the buggy program and the test
        "--rollout.batch_size", "32",
        "--rollout.num_cpus", "0.5",
        "--rollout.kv_cache_gib", "0.1",
        "--eval.n", "2",
        "--steps-per-round", "2",
        "--repairs-per-problem", "2",
    ]  # fmt: skip
    run_module("launch.selfplay", [*args, "--rounds", "1"], tmp_path, tmp_path / "first.log")
    first = read_jsonl(run_dir / "rounds.jsonl")
    assert [r["round"] for r in first] == [0, 1]

    # a second round cut short: it left a directory behind and no row
    (run_dir / "round-2" / "train").mkdir(parents=True)
    (run_dir / "round-2" / "train" / "metrics.jsonl").write_text('{"step": 1}\n')
    run_module("launch.selfplay", [*args, "--rounds", "2"], tmp_path, tmp_path / "second.log")
    rounds = read_jsonl(run_dir / "rounds.jsonl")
    assert [r["round"] for r in rounds] == [0, 1, 2]
    assert rounds[:2] == first, "a resumed run does not redo finished rounds"
    assert [m["step"] for m in read_jsonl(run_dir / "round-2" / "train" / "metrics.jsonl")] == [
        1,
        2,
    ]
    assert (run_dir / "rounds.png").is_file()

    for previous, row in itertools.pairwise(rounds):
        assert 0 <= row["pass@1"] <= 1 and row["pass@1_before"] == previous["pass@1"]
        # round r trained from round r-1's weights, and its checkpoint is a loadable model
        assert (Path(row["checkpoint"]) / "model.safetensors").is_file()
        saved = (run_dir / f"round-{row['round']}" / "train" / "config.toml").read_text()
        assert f'path = "{previous["checkpoint"]}"' in saved
        # the profile: every training problem's pass rate over eval.n samples, and the
        # repair tasks aimed only at problems it failed, at most 2 x its failure rate each
        rates = row["profile"]["pass_rate"]
        assert len(rates) == 10 and row["profile"]["samples"] == 20
        assert sum(row["profile"]["verdicts"].values()) == pytest.approx(1.0)
        by_problem = row["tasks"]["repairs_by_problem"]
        assert row["tasks"]["repairs"] == sum(by_problem.values()) > 0
        for task, count in by_problem.items():
            assert 1 <= count <= math.ceil(2 * (1 - rates[task]))
        # the round's problem file: the training problems plus its repairs
        rows = read_jsonl(run_dir / f"round-{row['round']}" / "problems.jsonl")
        assert len(rows) == 10 + row["tasks"]["repairs"]
        assert all(r["prompt"].endswith(r["program_prefix"]) for r in rows if "operator" in r)
