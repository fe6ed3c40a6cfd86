"""``python -m bench.sandbox --stdio`` on three Kick Start packages: it runs, every program
passes on both sides, and it prints the lines the docs quote. No timing is asserted: the
numbers come from the benchmark's own output (docs/benchmarks.md), never from a test."""

from __future__ import annotations

import re
import subprocess
import sys

from bench.sandbox import stdio
from common.packages import load_packages
from tests.conftest import REPO_ROOT

KICKSTART = REPO_ROOT.parent / "shared/data/codejam/kickstart"
PRACTICE_2013 = KICKSTART / "2013" / "practice_round"


def test_bench_prints_both_sides_the_speed_up_and_the_memory(capsys):
    argv = ["--stdio", "--packages", str(PRACTICE_2013), "--rounds", "1", "--answer-mb", "2"]
    assert stdio.main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("5 tests of 3 packages (0 skipped)")
    assert re.search(r"pool +5 tests in .* ms/test +cpu .* ms/test +all passed", out)
    assert re.search(r"subprocess +5 tests in .* ms/test +cpu .* ms/test +all passed", out)
    assert re.search(r"pool, empty +200 tests in .* all passed", out)
    assert re.search(r"large answer: 2\.\d MB, passed in .* RSS .*x the answer.* allocations", out)
    assert re.search(r"median speed-up: [\d.]+x \(rounds .*ceiling: [\d.]+x\)", out)
    assert "tests: front" in out and "empty: front" in out


def test_a_missing_packages_directory_is_one_line_and_status_2(tmp_path):
    missing = tmp_path / "no"
    argv = [sys.executable, "-m", "bench.sandbox", "--stdio", "--packages", str(missing)]
    done = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"error: no directory at {missing}; give --packages DIR"]


def test_the_table_program_tells_every_kick_start_input_apart():
    """The fingerprint (length and last bytes) is unique in every package that ships: a
    collision would raise here rather than make the bench time a wrong answer."""
    problems, _ = load_packages(KICKSTART)
    assert all(stdio.table_program(problem).startswith("import sys\n") for problem in problems)
