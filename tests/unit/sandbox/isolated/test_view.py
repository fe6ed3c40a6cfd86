"""The worker's view (sandbox/isolated/view.py), built in a throwaway process's own user and
mount namespaces: a checkout under a bound directory stays out of it, and a view that could
not be built leaves nothing mounted behind (the scratch directory's clean-up would empty what
it found there). The view as programs see it is tested through the pool
(sandbox/pool/test_attacks.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import REPO_ROOT

SETUP = """
import json, os, sys
from sandbox.isolated import syscalls, view
uid, gid = os.geteuid(), os.getegid()
syscalls.unshare(syscalls.CLONE_NEWUSER | syscalls.CLONE_NEWNS)
open("/proc/self/setgroups", "w").write("deny")
open("/proc/self/uid_map", "w").write(f"0 {uid} 1")
open("/proc/self/gid_map", "w").write(f"0 {gid} 1")
syscalls.mount(None, "/", None, syscalls.MS_REC | syscalls.MS_PRIVATE, None)
base = sys.argv[1]
"""


def _run(tmp_path: Path, body: str) -> dict:
    script = SETUP + textwrap.dedent(body)
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)], cwd=REPO_ROOT, capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_a_checkout_under_a_bound_directory_is_covered(tmp_path: Path) -> None:
    """As the official Python image's /usr/src/app under /usr: the checkout's own files are
    not in the view, the profile's paths inside it (the package, a venv) are; a profile path
    that holds the checkout (the executable's prefix of a Python in ~/bin) is not bound."""
    for path in ("shared/other.txt", "shared/repo/tests/answers.txt", "shared/repo/pkg/m.py"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("x")
    (tmp_path / "root").mkdir()
    (tmp_path / "scratch").mkdir()
    report = _run(
        tmp_path,
        """
        view.CHECKOUT = f"{base}/shared/repo"
        view.SYSTEM_DIRS = (f"{base}/shared",)  # in the place of /usr
        profile = view.Profile(binds=[f"{base}/shared/repo/pkg", base])
        view.build(f"{base}/root", f"{base}/scratch", profile)
        print(json.dumps({
            "shared": sorted(os.listdir(f"{base}/shared")),
            "repo": sorted(os.listdir(f"{base}/shared/repo")),
            "pkg": sorted(os.listdir(f"{base}/shared/repo/pkg")),
            "top": sorted(os.listdir("/")),
            "base": sorted(os.listdir(base)),
        }))
        """,
    )
    assert report["shared"] == ["other.txt", "repo"]
    assert report["repo"] == ["pkg"]  # no tests/
    assert report["pkg"] == ["m.py"]
    assert "home" not in report["top"] and "proc" in report["top"]
    assert report["base"] == ["scratch", "shared"]  # not root/, not bound whole


def test_a_view_that_cannot_be_built_leaves_nothing_mounted(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    report = _run(
        tmp_path,
        """
        profile = view.Profile(binds=[f"{base}/missing"])
        try:
            view.build(f"{base}/root", f"{base}/scratch", profile)
        except OSError:
            pass
        mounts = open("/proc/self/mountinfo").read()
        print(json.dumps({"left": [line for line in mounts.splitlines() if base in line],
                          "root": os.listdir(f"{base}/root"), "cwd": os.getcwd()}))
        """,
    )
    assert report == {"left": [], "root": [], "cwd": "/"}
