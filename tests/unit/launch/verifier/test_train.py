"""``python -m launch.verifier.train``: the metrics by hand, the split by problem, and a verifier
trained on a small fixed record set that the ``scorer`` term loads unchanged."""

from __future__ import annotations

import argparse
import contextlib
import json
import math

import pytest

from launch.loop.rollouts import RolloutWriter
from launch.verifier.split import problem_families
from launch.verifier.train import (
    VerifierError,
    auc,
    calibration,
    evaluate_scores,
    examples_from,
    format_report,
    main,
    split_by_problem,
)


def test_auc_counts_pairs_ordered_right_and_ties_as_half():
    # passing 0.35 beats 0.1 but not 0.4; passing 0.8 beats both: 3 of 4 pairs
    assert auc([0.1, 0.4, 0.35, 0.8], [False, False, True, True]) == 0.75
    assert auc([0.5, 0.5], [True, False]) == 0.5
    assert auc([0.2, 0.9], [False, True]) == 1.0
    assert math.isnan(auc([0.2, 0.9], [True, True]))


def test_calibration_bins_predictions_and_observed_rates():
    table = calibration([0.1, 0.15, 0.5, 0.9, 1.0], [False, True, True, True, True])
    assert [(r["low"], r["count"]) for r in table] == [(0.0, 2), (0.4, 1), (0.8, 2)]
    assert table[0]["predicted"] == pytest.approx(0.125) and table[0]["observed"] == 0.5
    assert table[2]["observed"] == 1.0


def test_auc_among_running_programs_leaves_out_the_ones_that_crash():
    # a crash (0.05) is below both passes; the pair (0.4 pass, 0.6 fail) is ordered wrong:
    # 1 of 2 pairs among running programs, 3 of 4 overall (with the crash's two pairs)
    scores, passed = [0.05, 0.4, 0.6, 0.9], [False, True, False, True]
    metrics = evaluate_scores(scores, passed, runs=[False, True, True, True])
    assert metrics["auc"] == 0.75 and metrics["auc_running"] == 0.5 and metrics["running"] == 3
    assert "AUC among the 3 programs that run" in format_report(metrics)
    assert "auc_running" not in evaluate_scores(scores, passed)  # process verifiers: no verdicts


def test_split_by_problem_is_disjoint_seeded_and_never_empty():
    ids = [f"p{i}" for i in range(10)] * 3
    train, held = split_by_problem(ids, 0.2, seed=1)
    assert len(held) == 2 and not set(train) & set(held) and len(train) + len(held) == 10
    assert split_by_problem(ids, 0.2, seed=1) == (train, held)
    assert len(split_by_problem(ids[:2], 0.01, 0)[1]) == 1  # at least one held out
    assert len(split_by_problem(ids[:2], 0.99, 0)[0]) == 1  # and one to train on
    with pytest.raises(VerifierError, match="at least 2"):
        split_by_problem(["p0", "p0"], 0.2, 0)


def test_a_problem_its_repair_tasks_and_its_prompt_twins_land_on_one_side():
    """Records of 12 problems: p0..p5 each with two repair tasks (p0..p2's carry
    ``source_task_id``, p3..p5's only the ``/repair/<k>`` id of older records), and q0..q5
    whose prompts come in pairs (q0 = q1, q2 = q3, q4 = q5)."""
    rows = []
    for i in range(6):
        rows.append({"problem_id": f"p{i}", "prompt": f"task {i}"})
        for k in (1, 2):
            repair = {"problem_id": f"p{i}/repair/{k}", "prompt": f"fix {i}.{k}"}
            rows.append({**repair, "source_task_id": f"p{i}"} if i < 3 else repair)
        rows.append({"problem_id": f"q{i}", "prompt": f"shared {i // 2}"})
    families = problem_families(rows)
    assert len(set(families.values())) == 6 + 3
    ids = [row["problem_id"] for row in rows]
    together = [[f"p{i}", f"p{i}/repair/1", f"p{i}/repair/2"] for i in range(6)]
    together += [[f"q{i}", f"q{i + 1}"] for i in (0, 2, 4)]
    for seed in range(100):
        train, held = split_by_problem(ids, 0.3, seed, families)
        assert set(train) | set(held) == set(ids) and not set(train) & set(held)
        assert train and held
        for family in together:
            assert set(family) <= set(train) or set(family) <= set(held), (seed, family)
    # one prompt for every problem: nothing can be held out without training on its prompt
    with pytest.raises(VerifierError, match="1 family"):
        split_by_problem(["a", "b"], 0.5, 0, problem_families(
            [{"problem_id": "a", "prompt": "x"}, {"problem_id": "b", "prompt": "x"}]
        ))  # fmt: skip


def test_a_family_of_one_problem_each_splits_as_the_problems_would():
    ids = [f"p{i}" for i in range(10)]
    families = problem_families([{"problem_id": p, "prompt": p} for p in ids])
    for seed in range(5):
        assert split_by_problem(ids, 0.2, seed, families) == split_by_problem(ids, 0.2, seed)


def _row(target: int, guess: int, step: int = 1) -> dict:
    passed = target == guess
    return {
        "step": step, "problem_id": f"synthetic/{target}",
        "prompt": f"# Return the number {target}.\ndef answer():\n    return ",
        "completion": f"{guess}\n", "verdict": "passed" if passed else "failed",
        "tests_passed": 4 if passed else 3 - min(abs(target - guess), 3) // 2,
        "tests_total": 4,
    }  # fmt: skip


def test_examples_are_distinct_programs_without_infra_errors():
    rows = [_row(3, 3), _row(3, 3, step=2), _row(3, 4), {**_row(5, 5), "verdict": "infra_error"}]
    rows.append({**_row(3, 0), "completion": "0)\n", "verdict": "syntax_error", "tests_passed": 0})
    for verdict, guess in (("runtime_error", 1), ("timeout", 2)):
        rows.append({**_row(3, guess), "verdict": verdict, "tests_passed": 0})
    examples = examples_from(rows, "pass")
    assert [(e["label"], e["count"]) for e in examples] == [(1.0, 2)] + [(0.0, 1)] * 4
    assert [e["runs"] for e in examples] == [True, True, False, False, False]
    assert [e["label"] for e in examples_from(rows, "fraction")] == [1.0, 0.75, 0, 0, 0]  # of 4
    # a binary reward's record stops at the first failing test: the tests not run count as
    # not passed (the tightest bound the record gives; 0, the verdict, would be a looser one)
    stopped = {**_row(3, 4), "tests_passed": 2, "test_verdicts": ["passed", "passed", "failed"]}
    assert examples_from([stopped], "fraction")[0]["label"] == 0.5
    # a transcript with feedback in it, or a self-play role's answer, is not one program
    not_one_program = [{**_row(3, 3), "turns": 2}, {**_row(3, 3), "role": "fixer"}]
    assert examples_from(not_one_program, "pass") == []


def test_process_examples_leave_out_multi_turn_transcripts(monkeypatch, tmp_path):
    """Only single answers reach the Monte Carlo labelling (a transcript's feedback is not
    program text to continue)."""
    from launch.verifier import train as train_verifier

    chosen = []
    monkeypatch.setattr(train_verifier, "load_tokenizer", lambda path: None)
    monkeypatch.setattr(train_verifier, "locate_model", lambda path, flag: path)
    monkeypatch.setattr(train_verifier, "build_worker", lambda *a: argparse.Namespace(generate=0))
    monkeypatch.setattr(train_verifier, "SandboxPool", lambda config: contextlib.nullcontext())

    def labels(programs, *args):
        chosen.extend(programs)
        return []

    monkeypatch.setattr(train_verifier, "mc_step_labels", labels)
    args = argparse.Namespace(
        policy=None, problems="synthetic", split=None, format="auto", seed=0, mc_programs=8,
        dtype="float32", mc_samples=2, temperature=1.0, max_new_tokens=4, kv_cache_gib=1.0,
        stop=None, max_model_len=64, step_split="line", workers=1,
    )  # fmt: skip
    rows = [_row(3, 4), {**_row(5, 6), "turns": 2, "completion": "6\n# Error\n6\n"}]
    assert train_verifier.process_examples(args, rows, "model") == []
    assert [(p.problem_id, text) for p, text in chosen] == [("synthetic/3", "4\n")]


def test_a_verifier_trained_on_fixed_records_loads_as_a_scorer(tiny_model_path, tmp_path, capsys):
    from actor.scorer import RewardScorer
    from common.config import ScorerOptions

    writer = RolloutWriter(tmp_path / "rollouts")
    writer.write(1, [_row(target, guess) for target in range(10) for guess in range(10)])
    out = tmp_path / "verifier"
    argv = ["--rollouts", str(tmp_path / "rollouts"), "--model", tiny_model_path,
            "--out", str(out), "--epochs", "1", "--held-out", "0.3",
            "--max-length", "32"]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "100 records, 100 distinct programs" in printed and "AUC" in printed
    assert "AUC among the 30 programs that run" in printed  # every record ran to a verdict
    summary = json.loads((out / "verifier.json").read_text())
    train, held = set(summary["train_problems"]), set(summary["held_out_problems"])
    assert len(held) == 3 and not train & held
    assert train | held == {f"synthetic/{t}" for t in range(10)}
    assert summary["train_examples"] == 70 and summary["held_out"]["examples"] == 30
    assert summary["held_out"]["running"] == 30 and summary["target"] == "fraction"
    scorer = RewardScorer(str(out), ScorerOptions(path=str(out), max_length=32))
    scores = scorer.score(
        ["# Return the number 2.\ndef answer():\n    return "] * 2, ["2\n", "7\n"]
    )
    assert len(scores) == 2 and all(0.0 <= s <= 1.0 for s in scores)


def test_user_mistakes_are_one_line(tiny_model_path, tmp_path, capsys):
    missing = ["--rollouts", str(tmp_path / "nope"), "--model", tiny_model_path,
               "--out", str(tmp_path / "v")]  # fmt: skip
    assert main(missing) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["--rollouts", str(empty), *missing[2:]]) == 2  # a directory, no records
    assert "no records" in capsys.readouterr().err


def test_rerank_takes_each_problems_top_scored_sample():
    from launch.evaluate import rerank

    def record(task: str, passed: bool, verdict: str = "") -> dict:
        return {
            "task_id": task,
            "passed": passed,
            "verdict": verdict or ("passed" if passed else "failed"),
        }

    records = [record("a", True), record("a", False), record("b", False), record("b", True),
               record("c", False, "infra_error"), record("c", True)]  # fmt: skip
    scores = [0.2, 0.9, 0.1, 0.8, 0.99, 0.1]
    # a: the failing sample ranks first; b: the passing one; c: the infra error is never chosen
    assert rerank(records, scores) == pytest.approx(2 / 3)
    assert rerank(records[:2], [0.5, 0.5]) == 1.0  # a tie goes to the earliest sample
    assert math.isnan(rerank(records[4:5], [0.5]))


def test_rerank_and_pass_at_n_count_the_same_problems():
    """A problem with fewer than n judged samples (c: one lost to an infra error) has no pass@n
    estimate, and so no reranked pass@1 either: both average over a and b."""
    from launch.evaluate import rerank
    from launch.loop.evaluation import summarize

    records = [
        {"task_id": task, "passed": passed, "verdict": verdict}
        for task, passed, verdict in [
            ("a", False, "failed"), ("a", True, "passed"),
            ("b", False, "failed"), ("b", False, "failed"),
            ("c", True, "passed"), ("c", False, "infra_error"),
        ]
    ]  # fmt: skip
    scores = [0.1, 0.9, 0.5, 0.4, 0.9, 0.1]
    assert summarize(records, [2])["eval/pass@2"] == pytest.approx(1 / 2)  # a and b
    assert rerank(records, scores, n=2) == pytest.approx(1 / 2)  # a: passes, b: fails
    assert rerank(records, scores) == pytest.approx(2 / 3)  # n = 1: c counts too
