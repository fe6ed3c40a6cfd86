"""pass@k: the unbiased estimator against hand-computed values, and the evaluation loop with
fake generation and execution."""

from __future__ import annotations

import math

import pytest

from common.types import Completion, ExecutionResult, Problem, StdioSpec, StdioTest, Verdict
from launch.loop.evaluation import (
    EvalError,
    evaluate,
    group_passes,
    group_summary,
    sample_and_score,
    summarize,
)
from launch.loop.passk import mean_pass_at_k, parse_ks, pass_at_k


def test_pass_at_1_is_the_pass_fraction():
    assert pass_at_k(n=5, c=2, k=1) == pytest.approx(0.4)


def test_pass_at_2_by_hand():
    # 1 - C(3, 2) / C(5, 2) = 1 - 3 / 10
    assert pass_at_k(n=5, c=2, k=2) == pytest.approx(0.7)


def test_edge_cases():
    assert pass_at_k(5, 0, 3) == 0.0
    assert pass_at_k(5, 4, 2) == 1.0  # only one failing sample: every pair has a pass
    assert pass_at_k(10, 10, 10) == 1.0


def test_matches_the_binomial_formula_where_it_does_not_overflow():
    for n, c, k in [(10, 3, 1), (10, 3, 5), (20, 1, 10), (200, 17, 100)]:
        expected = 1 - math.comb(n - c, k) / math.comb(n, k)
        assert pass_at_k(n, c, k) == pytest.approx(expected, rel=1e-12)


def test_stable_for_large_n():
    value = pass_at_k(n=10_000, c=3, k=1000)
    assert 0 < value < 1 and math.isfinite(value)


def test_invalid_arguments_are_refused():
    with pytest.raises(ValueError, match=r"k \(6\) must be between 1 and the sample count \(5\)"):
        pass_at_k(5, 1, 6)
    with pytest.raises(ValueError, match="passing samples"):
        pass_at_k(5, 6, 1)


def test_mean_leaves_out_problems_with_too_few_samples():
    # problem A: n=5, c=2 -> 0.4 / 0.7; problem B: n=1 (4 infra errors), c=1 -> pass@1 = 1
    means = mean_pass_at_k([(5, 2), (1, 1)], [1, 2, 10])
    assert means[1] == pytest.approx((0.4 + 1.0) / 2)
    assert means[2] == pytest.approx(0.7)
    assert math.isnan(means[10])


def test_parse_ks():
    assert parse_ks("10,1, 1") == [1, 10]
    with pytest.raises(ValueError, match="at least 1"):
        parse_ks("0,1")


def records(task_id: str, verdicts: list[str]) -> list[dict]:
    return [{"task_id": task_id, "verdict": v, "passed": v == "passed"} for v in verdicts]


def test_summarize_by_hand_ignores_infra_errors():
    rows = records("a", ["passed", "failed", "passed", "failed", "failed"])
    rows += records("b", ["failed", "infra_error", "failed", "failed", "failed"])
    metrics = summarize(rows, [1, 2])
    assert metrics["eval/pass@1"] == pytest.approx((0.4 + 0.0) / 2)
    assert metrics["eval/pass@2"] == pytest.approx((0.7 + 0.0) / 2)
    assert metrics["eval/infra_error_frac"] == pytest.approx(0.1)


class FakeTokenizer:
    bos_token = None

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [ord(ch) for ch in text]}


def fake_generate(requests):
    # answers correctly on odd seeds, so the verdicts are known in advance; returned reversed
    # to check that completions are matched by id, not by position
    out = []
    for request in requests:
        for index, seed in enumerate(request.seeds):
            text = "def f():\n    return 1\n" if seed % 2 else "def f():\n    return 0\n"
            out.append(Completion(request.request_id, index, [], [1], [0.0], text, "stop", 0))
    return out[::-1]


def fake_execute(jobs):
    verdicts = [Verdict.PASSED if "return 1" in job.code else Verdict.FAILED for job in jobs]
    return [ExecutionResult(v, int(v is Verdict.PASSED), 1) for v in verdicts]


PROBLEMS = [Problem(f"p{i}", f"Write f #{i}.", ("assert f() == 1",)) for i in range(3)]


def test_evaluate_matches_pass_at_k_of_the_sampled_verdicts():
    rows = sample_and_score(PROBLEMS, FakeTokenizer(), fake_generate, fake_execute, n=4, seed=1)
    assert [r["sample_index"] for r in rows[:4]] == [0, 1, 2, 3]
    counts = {
        p.problem_id: sum(r["passed"] for r in rows if r["task_id"] == p.problem_id)
        for p in PROBLEMS
    }
    expected1 = sum(c / 4 for c in counts.values()) / 3
    expected2 = sum(1 - math.comb(4 - c, 2) / math.comb(4, 2) for c in counts.values()) / 3
    metrics = evaluate(
        PROBLEMS, FakeTokenizer(), fake_generate, fake_execute, n=4, ks=[1, 2], seed=1
    )
    assert metrics["eval/pass@1"] == pytest.approx(expected1)
    assert metrics["eval/pass@2"] == pytest.approx(expected2)
    assert 0 < expected1 < 1, "seeds should give a mix of passes and failures"


def test_evaluate_refuses_k_above_n():
    with pytest.raises(EvalError, match="pass@5 needs at least 5 samples"):
        evaluate(PROBLEMS, FakeTokenizer(), fake_generate, fake_execute, n=2, ks=[1, 5])


def test_stdio_problems_get_pass_at_k_per_test_group():
    """A sample passes a group when it passes every test of it; ``test_verdicts`` follow the
    run order (samples first), and a test not run counts as failed."""
    tests = (
        StdioTest("secret/a/1", b"", b"", "secret/a"),
        StdioTest("sample/1", b"", b"", "sample"),
        StdioTest("secret/a/2", b"", b"", "secret/a"),
        StdioTest("secret/b/1", b"", b"", "secret/b"),
    )
    problem = Problem("s", "Print.", (), stdio=StdioSpec(tests))
    P, F = Verdict.PASSED, Verdict.FAILED
    runs = [  # in run order: sample/1, secret/a/1, secret/a/2, secret/b/1
        [P, P, P, P],
        [P, P, F, P],
        [F],  # stopped at the sample
        [P, P, P, P],
    ]
    results = [ExecutionResult(F if F in v else P, v.count(P), 4, v) for v in runs]
    assert group_passes(problem, results[1]) == {
        "sample": True,
        "secret/a": False,
        "secret/b": True,
    }
    assert group_passes(problem, results[2]) == dict.fromkeys(
        ["sample", "secret/a", "secret/b"], False
    )
    assert group_passes(PROBLEMS[0], results[0]) == {}
    rows = [
        {
            "task_id": "s",
            "verdict": r.verdict.value,
            "passed": r.passed,
            "groups": group_passes(problem, r),
        }
        for r in results
    ]
    metrics = summarize(rows, [1, 2])
    assert metrics["eval/pass@1"] == pytest.approx(2 / 4)
    assert metrics["eval/pass@1/sample"] == pytest.approx(3 / 4)
    assert metrics["eval/pass@1/secret/a"] == pytest.approx(2 / 4)
    assert metrics["eval/pass@1/secret/b"] == pytest.approx(3 / 4)
    assert metrics["eval/pass@2/secret/a"] == pytest.approx(1 - 1 / 6)
    assert group_summary(metrics)["secret/b"] == {"pass@1": 0.75, "pass@2": 1.0}
    assert "eval/pass@1/sample" not in summarize(records("a", ["passed"]), [1])


def test_every_problem_gets_pass_at_k_per_kind_and_difficulty():
    def row(task: str, kind: str, difficulty: str, passed: bool) -> dict:
        verdict = "passed" if passed else "failed"
        return {"task_id": task, "verdict": verdict, "passed": passed, "groups": {}, "kind": kind,
                "difficulty": difficulty}  # fmt: skip

    rows = [
        row("a", "class_method", "Easy", True),
        row("a", "class_method", "Easy", False),
        row("b", "class_method", "Hard", False),
        row("b", "class_method", "Hard", False),
        row("c", "function", "", True),
        row("c", "function", "", True),
    ]
    metrics = summarize(rows, [1])
    assert metrics["eval/pass@1"] == pytest.approx((0.5 + 0 + 1) / 3)
    assert metrics["eval/pass@1/kind/class_method"] == pytest.approx(0.25)
    assert metrics["eval/pass@1/kind/function"] == pytest.approx(1.0)
    assert group_summary(metrics, "difficulty") == {"Easy": {"pass@1": 0.5}, "Hard": {"pass@1": 0}}
    assert group_summary(metrics) == {}  # test groups only: none here
