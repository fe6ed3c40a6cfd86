"""``python -m sandbox.verify_problem`` as a user runs it: problemtools' example packages'
labelled submissions get their labels (``different`` through its own C++ output validator), a
mislabelled one is caught, and what is not judged is said."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox.trusted.languages import missing_compiler
from tests.conftest import REPO_ROOT

KATTIS = REPO_ROOT.parent / "shared" / "data" / "kattis-examples"
NATIVE = not (missing_compiler("c") or missing_compiler("cpp"))


def verify(package: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sandbox.verify_problem", str(package)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.skipif(not NATIVE, reason="no C/C++ compiler here")
@pytest.mark.parametrize(
    ("name", "judged", "skipped"),
    [
        ("hello", 5, ["hello.java", "hello.kt", "hello.rs"]),
        ("oddecho", 2, ["sol.py"]),
        ("different", 7, ["different_py2.py", "different_slow.py", "prolog", "different.go"]),
    ],
)
def test_every_python_c_and_cpp_submission_gets_its_label(name, judged, skipped):
    done = verify(KATTIS / name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{judged} of {judged} submissions got their label" in done.stdout
    assert "MISMATCH" not in done.stdout
    for file in skipped:
        assert any(file in line and "skipped" in line for line in done.stdout.splitlines())


def test_a_mislabelled_submission_is_caught(tmp_path):
    package = tmp_path / "hello"  # hello's problem and data, submissions of our own
    for part in ("data", "problem_statement"):
        shutil.copytree(KATTIS / "hello" / part, package / part)  # read-only, as ../shared's
    shutil.copyfile(KATTIS / "hello" / "problem.yaml", package / "problem.yaml")
    (package / "submissions" / "accepted").mkdir(parents=True)
    (package / "submissions" / "wrong_answer").mkdir()
    (package / "submissions" / "accepted" / "ok.py").write_text("print('Hello World!')\n")
    (package / "submissions" / "wrong_answer" / "right.py").write_text("print('Hello World!')\n")
    done = verify(package)
    assert done.returncode == 1
    assert "wrong_answer/right.py: MISMATCH: got accepted" in done.stdout
    assert "1 of 2 submissions got their label" in done.stdout


def test_what_is_not_judged_is_said_and_a_non_package_is_refused(tmp_path):
    done = verify(KATTIS / "guess")
    assert done.returncode == 0
    assert "not judged: interactive" in done.stdout
    refused = verify(tmp_path)
    assert refused.returncode == 2
    assert refused.stderr.strip() == f"error: {tmp_path}: no problem.yaml (not a problem package)"


def test_sandbox_check_judges_a_package_directorys_reference_solutions(tmp_path):
    """``python -m sandbox.check --problems DIR``: the packages' stdin/stdout problems, their
    Python reference solutions (the first accepted submission) judged as training judges."""
    out = tmp_path / "results.jsonl"
    args = ["--problems", str(KATTIS / "hello"), "--canonical", "--out", str(out)]
    done = subprocess.run(
        [sys.executable, "-m", "sandbox.check", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert (row["task_id"], row["verdict"], row["tests_passed"]) == ("hello", "passed", 1)
