"""Every MBPP reference solution passes through the pool; ``python -m sandbox.check``
(``sandbox/check.py``) end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from common.config import SandboxConfig
from sandbox import check
from sandbox.problems import load_problems
from sandbox.trusted.pool import SandboxPool
from tests.conftest import REPO_ROOT

DATA = REPO_ROOT.parent / "shared" / "data"
# The slowest reference, MBPP task 123, needs ~2.4 s on a quiet 2-core VM and took 14-16 s at a
# load average of 9-14 (2026-11-26, six agents sharing the box): the limits leave 4x over the
# busiest measure, since this test checks the references' verdicts, not their speed.
CONFIG = SandboxConfig(num_workers=2, timeout_s=120, test_timeout_s=60, cache=False)

pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason="../shared/data not present")


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(CONFIG) as shared:
        yield shared


@pytest.mark.parametrize("name", ["mbpp.jsonl", "sanitized-mbpp.json"])
def test_all_mbpp_reference_solutions_pass(pool, name):
    problems = list(load_problems(DATA / name).values())
    results = pool.run([p.reference_job() for p in problems])
    failing = [
        (p.task_id, r.verdict.value, r.detail) for p, r in zip(problems, results) if not r.passed
    ]
    assert failing == []
    assert len(results) == {"mbpp.jsonl": 974, "sanitized-mbpp.json": 427}[name]


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_check_cli_end_to_end(tmp_path):
    rows = [json.loads(line) for line in (DATA / "mbpp.jsonl").read_text().splitlines()[:3]]
    problems = write_jsonl(tmp_path / "p.jsonl", rows)
    samples = write_jsonl(
        tmp_path / "s.jsonl",
        [
            {"task_id": rows[0]["task_id"], "completion": rows[0]["code"], "sample": 0},
            {
                "task_id": rows[1]["task_id"],
                "completion": "def similar_elements(a, b):\n    return ()\n",
                "sample": 1,
            },
            {"task_id": rows[2]["task_id"], "completion": "def is_not_prime(", "sample": 2},
        ],
    )
    out = tmp_path / "out.jsonl"
    assert (
        check.main(["--problems", str(problems), "--samples", str(samples), "--out", str(out)]) == 0
    )
    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["sample"] for r in results] == [0, 1, 2]
    assert [r["verdict"] for r in results] == ["passed", "failed", "syntax_error"]
    assert results[0]["passed"] and results[0]["tests_passed"] == results[0]["tests_total"] == 3


def test_check_cli_canonical_on_json_array(tmp_path):
    rows = json.loads((DATA / "sanitized-mbpp.json").read_text())[:5]
    problems = tmp_path / "p.json"
    problems.write_text(json.dumps(rows, indent=1))
    out = tmp_path / "out.jsonl"
    assert check.main(["--problems", str(problems), "--canonical", "--out", str(out)]) == 0
    assert all(json.loads(line)["passed"] for line in out.read_text().splitlines())


def test_check_cli_reports_malformed_json_with_line_number(tmp_path):
    problems = tmp_path / "p.jsonl"
    problems.write_text('{"task_id": 1, "code": "", "test_list": []}\n{"task_id": 2,\n')
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sandbox.check",
            "--problems",
            str(problems),
            "--canonical",
            "--out",
            str(tmp_path / "o"),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert f"{problems}:2: not valid JSON" in proc.stderr and "Traceback" not in proc.stderr


def test_check_cli_rejects_unknown_task_and_missing_fields(tmp_path, capsys):
    problems = write_jsonl(tmp_path / "p.jsonl", [{"task_id": 1, "code": "", "test_list": []}])
    samples = write_jsonl(tmp_path / "s.jsonl", [{"task_id": 99, "completion": ""}])
    args = ["--problems", str(problems), "--samples", str(samples), "--out", str(tmp_path / "o")]
    assert check.main(args) == 2
    assert "unknown task_id 99" in capsys.readouterr().err
    write_jsonl(problems, [{"task_id": 1, "test_list": []}])
    assert check.main(args) == 2
    assert "missing field(s) code" in capsys.readouterr().err


def test_humaneval_rows_are_detected(tmp_path):
    row = {
        "task_id": "HumanEval/0",
        "prompt": "def inc(x):\n",
        "canonical_solution": "    return x + 1\n",
        "test": "def check(candidate):\n    assert candidate(1) == 2\n"
        "    assert candidate(5) == 6\n",
        "entry_point": "inc",
    }
    problems = write_jsonl(tmp_path / "p.jsonl", [row])
    samples = write_jsonl(
        tmp_path / "s.jsonl",
        [
            {"task_id": "HumanEval/0", "completion": "    return x + 1\n"},
            {"task_id": "HumanEval/0", "completion": "    return x\n"},
        ],
    )
    out = tmp_path / "o.jsonl"
    assert (
        check.main(["--problems", str(problems), "--samples", str(samples), "--out", str(out)]) == 0
    )
    assert [json.loads(line)["passed"] for line in out.read_text().splitlines()] == [True, False]
