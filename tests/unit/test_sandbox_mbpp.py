"""Every MBPP reference solution passes through the pool; the check CLI end to end."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from common.config import SandboxConfig
from sandbox import check
from sandbox.problems import load_problems
from sandbox.trusted.pool import SandboxPool

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
ROOT = Path(__file__).resolve().parents[2]
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
        cwd=ROOT,
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


def test_bench_prints_both_rates_and_cpu_per_execution(capsys):
    from sandbox.bench import throughput as bench

    # 40 samples: enough CPU (~0.1 s on the pool's side, spread over its processes) for the
    # per-process counters, in 10 ms clock ticks, to add up to more than zero
    argv = ["--problems", str(DATA / "mbpp.jsonl"), "--limit", "40", "--rounds", "1"]
    assert bench.main(argv) == 0
    out = capsys.readouterr().out
    assert out.count("pool passed 40/40") == 2  # all samples, then the one round
    for side in ("pool", "subprocess"):
        rows = re.findall(rf"^ +{side} +[\d.]+ executions/s .* cpu +([\d.]+) ms", out, re.M)
        assert len(rows) == 2 and all(float(cpu_ms) > 0 for cpu_ms in rows)
    assert "without samples that run > 1000 ms alone: none" in out
    # the round also runs the pool on empty programs: the speed-up's ceiling
    empty = re.findall(r"^ +pool, empty +([\d.]+) executions/s .* cpu +([\d.]+) ms", out, re.M)
    assert len(empty) == 1 and all(float(value) > 0 for value in empty[0])
    assert re.search(
        r"^  ceiling: [\d.]+x \(the speed-up if the programs cost nothing\)$", out, re.M
    )
    summary = re.search(
        r"^median speed-up without them: [\d.]+x \(.*ceiling: ([\d.]+)x\)$", out, re.M
    )
    assert summary and float(summary[1]) > 0
    assert "cpu per execution:" in out
    assert "baseline start-up imports from outside the standard library: " in out
    assert re.search(r"^pool hot pages .*; zygote loop in (C|Python)", out, re.M)
    # the pool's cost by role, for the samples and for empty programs
    for kind in ("samples", "empty"):
        line = re.search(rf"^  {kind}: +(.*)$", out, re.M)
        assert line, kind
        roles = dict(
            (role, (float(cpu), float(faults)))
            for role, cpu, faults in re.findall(r"(\w+) ([\d.]+) ms \((\d+) faults\)", line[1])
        )
        assert list(roles) == ["front", "server", "zygote", "child"]
        # fault counts are exact; an execution's processes always fault and use CPU (the
        # zygote's C loop need not fault at all)
        assert roles["child"][0] > 0 and roles["child"][1] > 0


def test_bench_reads_mbpp_beside_the_checkout_by_default(capsys):
    """docs/sandbox.md shows ``--problems ../shared/data/mbpp.jsonl`` as optional: the default is
    that file, found from the checkout whatever the working directory, and ``--help`` says so."""
    from sandbox.bench import throughput as bench

    assert Path(bench.DEFAULT_PROBLEMS) == DATA / "mbpp.jsonl"
    with pytest.raises(SystemExit):
        bench.main(["--help"])
    assert bench.DEFAULT_PROBLEMS in " ".join(capsys.readouterr().out.split())


def test_bench_without_its_problems_file_exits_2_with_one_line(tmp_path, monkeypatch, capsys):
    from sandbox.bench import throughput as bench

    missing = str(tmp_path / "mbpp.jsonl")
    monkeypatch.setattr(bench, "DEFAULT_PROBLEMS", missing)
    assert bench.main([]) == 2
    assert bench.main(["--problems", str(tmp_path / "other.jsonl")]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert (
        len(lines) == 2
        and lines[0] == f"error: no problems file at {missing}; give --problems FILE"
    )


def test_startup_imports_names_a_pth_hook_and_not_what_it_imports(tmp_path):
    from sandbox.bench.throughput import importtime_log, startup_imports

    (tmp_path / "hook_helper.py").write_text("")
    (tmp_path / "hook_module.py").write_text("import json\nimport hook_helper\n")
    (tmp_path / "hook.pth").write_text("import hook_module\n")
    log = importtime_log(f"import site; site.addsitedir({str(tmp_path)!r})")
    assert "Traceback" not in log
    names = [name for name, _ in startup_imports(log)]
    assert "hook_module" in names
    # what the hook imports counts in its time, stdlib or not; stdlib modules are never named
    assert "hook_helper" not in names and "json" not in names and "site" not in names


def test_this_project_adds_no_import_to_interpreter_start_up():
    """An editable install through setuptools' import-hook finder cost ~11 ms per start of
    every interpreter in the venv (the bench's baseline too); the install must be a plain
    path entry (``package-dir`` in pyproject.toml)."""
    from sandbox.bench.throughput import importtime_log, startup_imports

    log = importtime_log()
    assert "| site" in log  # a real start-up was recorded
    names = [name for name, _ in startup_imports(log)]
    assert not [name for name in names if "editable" in name or "grpo" in name], names


def test_tree_cpu_seconds_counts_children_already_reaped():
    from sandbox.bench.throughput import tree_cpu_seconds

    before = tree_cpu_seconds()
    burn = "import time\nwhile time.process_time() < 0.3:\n    pass"
    subprocess.run([sys.executable, "-c", burn], check=True)
    assert tree_cpu_seconds() - before >= 0.25
