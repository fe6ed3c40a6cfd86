"""``python -m bench.sandbox`` (``bench/sandbox/throughput.py``) on MBPP: both rates and the CPU
per execution it prints, where it finds its problems, and the start-up imports and CPU time it
measures with."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

DATA = REPO_ROOT.parent / "shared" / "data"

pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason="../shared/data not present")


def test_bench_prints_both_rates_and_cpu_per_execution(capsys):
    from bench.sandbox import throughput as bench

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
    from bench.sandbox import throughput as bench

    assert Path(bench.DEFAULT_PROBLEMS) == DATA / "mbpp.jsonl"
    with pytest.raises(SystemExit):
        bench.main(["--help"])
    assert bench.DEFAULT_PROBLEMS in " ".join(capsys.readouterr().out.split())


def test_bench_without_its_problems_file_exits_2_with_one_line(tmp_path, monkeypatch, capsys):
    from bench.sandbox import throughput as bench

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
    from bench.sandbox.throughput import importtime_log, startup_imports

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
    from bench.sandbox.throughput import importtime_log, startup_imports

    log = importtime_log()
    assert "| site" in log  # a real start-up was recorded
    names = [name for name, _ in startup_imports(log)]
    assert not [name for name in names if "editable" in name or "grpo" in name], names


def test_tree_cpu_seconds_counts_children_already_reaped():
    from bench.sandbox.throughput import tree_cpu_seconds

    before = tree_cpu_seconds()
    burn = "import time\nwhile time.process_time() < 0.3:\n    pass"
    subprocess.run([sys.executable, "-c", burn], check=True)
    assert tree_cpu_seconds() - before >= 0.25
