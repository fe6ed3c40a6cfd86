"""The sandbox starts and holds as an ordinary user, not only as root.

Clusters run the pool as an ordinary user, and these tests create one when they run as root
(as CI does): its own venv (a base interpreter it may run, the project and its packages on
the path through a ``.pth`` file), a file in its home that programs must not read, and the
venv that programs must not write (a ``.pth`` file there would run outside the sandbox).
The attack programs are in tests/unit/sandbox/escape_attempts.py; each passes only if refused.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.trusted import cgroups
from tests.conftest import REPO_ROOT
from tests.unit.sandbox.helpers import EXERCISM_EXCLUDED, LEETCODE_EXCLUDED

USER = "grpo-sandbox-test"
SCRIPT = REPO_ROOT / "tests" / "unit" / "sandbox" / "escape_attempts.py"
SECRET = "the canary's secret\n"
# MBPP samples of every kind the sandbox judges: references, wrong values, a crash, a
# program that does not parse.
WRONG = ["def {name}(*args):\n    return None\n", "def {name}(*args):\n    raise KeyError(1)\n"]


class Runner:
    """Runs commands as one user, with an interpreter that user may run."""

    def __init__(self, prefix: list[str], python: str, home: Path, site: Path) -> None:
        self.prefix, self.python, self.home, self.site = prefix, python, home, site

    def run(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(self.home)}
        command = [*self.prefix, self.python, *args]
        return subprocess.run(
            command, env=env, cwd="/", capture_output=True, text=True, timeout=timeout
        )


def _as(user: str) -> list[str]:
    return [shutil.which("runuser") or "runuser", "-u", user, "--"]


def _interpreter(user: str) -> str | None:
    """A Python of this one's minor version that ``user`` may run (this one's may live under
    /root, which other users cannot read)."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    candidates = [os.path.realpath(sys.executable), f"/usr/bin/python{version}"]
    candidates.append(shutil.which(f"python{version}") or "")
    check = f"import sys; assert sys.version.startswith('{version}.')"
    for path in filter(None, candidates):
        if subprocess.run([*_as(user), path, "-c", check], capture_output=True).returncode == 0:
            return path
    return None


@pytest.fixture(scope="module")
def ordinary() -> Iterator[Runner]:
    """This user when it is not root; else a dedicated ordinary user, created once, whose
    commands run in a cgroup made theirs (:func:`_delegated_cgroup`)."""
    site = Path(sysconfig.get_paths()["purelib"])
    if os.geteuid() != 0:
        yield Runner([], sys.executable, Path.home(), site)
        return
    if not (shutil.which("useradd") and shutil.which("runuser")):
        pytest.skip("needs useradd and runuser to create an ordinary user")
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--create-home", USER], check=True)
    entry = pwd.getpwnam(USER)
    home = Path(entry.pw_dir)
    base = _interpreter(USER)
    if base is None:
        pytest.skip(f"no Python {sys.version_info.major}.{sys.version_info.minor} {USER} may run")
    venv = home / "venv"
    if not (venv / "bin" / "python").exists():
        subprocess.run([*_as(USER), base, "-m", "venv", "--without-pip", str(venv)], check=True)
    user_site = next((venv / "lib").glob("python3.*/site-packages"))
    for leftover in user_site.glob("evil*"):  # from an earlier run of a broken sandbox
        leftover.unlink()
    pth = user_site / "grpo_code.pth"
    pth.write_text(f"{REPO_ROOT}\n{site}\n")
    os.chown(pth, entry.pw_uid, entry.pw_gid)
    # A package programs import (LeetCode's sortedcontainers) must be in the user's own venv,
    # which the sandbox's view binds, as it is in a user's install; root's, which this venv
    # reaches through the .pth, is outside the view.
    for package in ("sortedcontainers",):
        if not (user_site / package).exists():
            shutil.copytree(site / package, user_site / package)
    subprocess.run(["chown", "-R", f"{entry.pw_uid}:{entry.pw_gid}", str(user_site)], check=True)
    groups = _delegated_cgroup(entry.pw_uid, entry.pw_gid)
    # each command first moves its shell into the user's groups, then becomes the user there
    joins = "".join(f"echo $$ > {shlex.quote(g)}/cgroup.procs && " for g in groups)
    prefix = ["sh", "-c", f'{joins}exec "$@"', "sh", *_as(USER)] if groups else _as(USER)
    try:
        yield Runner(prefix, str(venv / "bin" / "python"), home, user_site)
    finally:
        for group in groups:
            _remove_tree(group)


def _delegated_cgroup(uid: int, gid: int) -> list[str]:
    """A memory and a pids cgroup (v1) under root's own, owned by ``uid``: what systemd's
    ``Delegate=yes`` gives a user's service, which these machines (no systemd) cannot. The
    user's pools then find a cgroup they may write by themselves
    (``sandbox/trusted/cgroups.py``); [] where root may not make one (a read-only cgroupfs):
    the user's pools then take the fallback, as root's do."""
    with open("/proc/self/cgroup") as f, open("/proc/self/mountinfo") as g:
        found = cgroups.find_hierarchies(f.read(), g.read())
    places = [h.own for h in found if h.version == 1]
    made: list[str] = []
    try:
        for place in places:
            group = os.path.join(place, f"grpo-sandbox-test-{os.getpid()}")
            os.mkdir(group)
            made.append(group)
            for path in [group, *(os.path.join(group, n) for n in ("cgroup.procs", "tasks"))]:
                os.chown(path, uid, gid)
    except OSError:
        for group in made:
            _remove_tree(group)
        return []
    return made


def _remove_tree(group: str) -> None:
    """Remove a cgroup and the groups below it (those of the user's pools that were killed
    before they closed), deepest first; a group still in use stays."""
    for directory, _, _ in sorted(os.walk(group), key=lambda w: -w[0].count(os.sep)):
        with contextlib.suppress(OSError):
            os.rmdir(directory)


def _canary(runner: Runner, directory: Path) -> Path:
    canary = directory / "canary.txt"
    canary.write_text(SECRET)
    canary.chmod(0o600)
    if runner.prefix:
        entry = pwd.getpwnam(USER)
        os.chown(canary, entry.pw_uid, entry.pw_gid)
    return canary


def _attack(runner: Runner, canary: Path) -> dict:
    paths = {
        "canary": str(canary),
        "venv_site": str(runner.site),
        "project": str(REPO_ROOT / "sandbox"),
        "home": "/" + canary.parts[1],  # the top-level directory a tmpfs hides
    }
    done = runner.run(str(SCRIPT), json.dumps(paths))
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _assert_held(report: dict, runner: Runner, canary: Path, before: set[str]) -> None:
    escaped = {name: v for name, v in report["verdicts"].items() if v != "passed"}
    assert not escaped, escaped
    assert canary.read_text() == SECRET
    assert {p.name for p in runner.site.iterdir()} == before
    assert not list((REPO_ROOT / "sandbox").glob("evil*"))
    assert report["isolation"] == "namespaces(user,net,pid,mount,ipc)+view+locked+seccomp+rlimits"


def test_escapes_are_refused_as_an_ordinary_user(ordinary: Runner) -> None:
    canary = _canary(ordinary, ordinary.home)
    before = {p.name for p in ordinary.site.iterdir()}
    _assert_held(_attack(ordinary, canary), ordinary, canary, before)


def test_escapes_are_refused_as_root(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("runs as root only (the ordinary-user case is the test above)")
    root = Runner([], sys.executable, Path.home(), Path(sysconfig.get_paths()["purelib"]))
    canary = _canary(root, tmp_path)
    before = {p.name for p in root.site.iterdir()}
    _assert_held(_attack(root, canary), root, canary, before)


def _samples(problems: Path, count: int) -> list[dict]:
    rows = [json.loads(line) for line in problems.read_text().splitlines()[:count]]
    samples = []
    for row in rows:
        name = row["test_list"][0].split("assert ", 1)[1].split("(", 1)[0].strip()
        samples.append({"task_id": row["task_id"], "completion": row["code"]})
        samples += [{"task_id": row["task_id"], "completion": w.format(name=name)} for w in WRONG]
        samples.append({"task_id": row["task_id"], "completion": "def broken(:\n"})
    return samples


def test_check_gives_the_same_verdicts_as_an_ordinary_user_as_as_root(ordinary: Runner) -> None:
    """``python -m sandbox.check`` on MBPP: same verdicts whoever runs it."""
    problems = REPO_ROOT.parent / "shared" / "data" / "mbpp.jsonl"
    work = Path(tempfile.mkdtemp(prefix="grpo-check-"))  # pytest's tmp_path is root's alone
    try:
        work.chmod(0o777)  # the ordinary user writes its results here
        samples = work / "samples.jsonl"
        samples.write_text("".join(json.dumps(s) + "\n" for s in _samples(problems, 20)))
        samples.chmod(0o644)
        verdicts = {}
        itself = Runner([], sys.executable, Path.home(), Path())
        for who, runner in [("user", ordinary), ("self", itself)]:
            out = work / f"{who}.jsonl"
            args = ["--problems", str(problems), "--samples", str(samples), "--out", str(out)]
            done = runner.run("-m", "sandbox.check", *args)
            assert done.returncode == 0, done.stderr[-2000:]
            verdicts[who] = [json.loads(line)["verdict"] for line in out.read_text().splitlines()]
    finally:
        shutil.rmtree(work)
    assert verdicts["user"] == verdicts["self"]
    assert verdicts["self"].count("passed") == 20
    assert {"failed", "syntax_error"} <= set(verdicts["self"])


def test_the_pool_suite_passes_as_an_ordinary_user(ordinary: Runner) -> None:
    """tests/unit/sandbox/pool/ (verdicts, limits, confinement, worker restarts after a crash
    or a call that raised, clean-up) run by that user in a pytest of its own: what the pool
    does after a failure starts processes and namespaces again, with that user's privileges.
    As root the same suite runs in this process."""
    if not ordinary.prefix:
        pytest.skip("not root: the suite already runs as this ordinary user")
    suite = REPO_ROOT / "tests" / "unit" / "sandbox" / "pool"
    flags = ["-q", "-p", "no:cacheprovider", "--rootdir", str(REPO_ROOT)]
    done = ordinary.run("-m", "pytest", *flags, str(suite), timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    summary = done.stdout.splitlines()[-1]
    assert " passed" in summary and "skipped" not in summary, done.stdout[-500:]


REFERENCES = {  # the problems file, its rows, the references that may fail (and why: there)
    "mbpp.jsonl": (974, set()),
    "sanitized-mbpp.json": (427, set()),
    "leetcode/LeetCodeDataset-v0.2.0-test.jsonl.gz": (200, LEETCODE_EXCLUDED),
    "exercism-python": (140, EXERCISM_EXCLUDED),
}


@pytest.mark.parametrize("name", list(REFERENCES))
def test_every_reference_passes_as_an_ordinary_user(ordinary: Runner, name: str) -> None:
    """The view, the IPC namespace, the filter and the memory layer as that user take nothing
    a reference solution needs, nor does a test run in its own process (as root:
    tests/unit/sandbox/test_check.py, tests/unit/common/test_leetcode.py and test_exercism.py).
    The timeout leaves room for MBPP task 123 (~2.4 s alone) on a loaded machine, as there."""
    if not ordinary.prefix:
        pytest.skip("not root: tests/unit/sandbox/test_check.py runs as this ordinary user")
    problems = REPO_ROOT.parent / "shared" / "data" / name
    work = Path(tempfile.mkdtemp(prefix="grpo-mbpp-"))  # pytest's tmp_path is root's alone
    try:
        work.chmod(0o777)
        out = work / "results.jsonl"
        args = ["--problems", str(problems), "--out", str(out), "--canonical"]
        done = ordinary.run("-m", "sandbox.check", *args, "--timeout-s", "120", timeout=900)
        assert done.returncode == 0, done.stderr[-2000:]
        rows = [json.loads(line) for line in out.read_text().splitlines()]
    finally:
        shutil.rmtree(work)
    count, excluded = REFERENCES[name]
    failing = [(r.get("task_id"), r["verdict"]) for r in rows if r["verdict"] != "passed"]
    assert not [task for task, _ in failing if task not in excluded], failing
    assert len(rows) == count
