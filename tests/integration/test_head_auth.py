"""``python -m launch.head start`` on a machine with no token gives a head that refuses jobs
submitted without the token and runs those submitted with it.

The head gets its own home (no ``~/.ray/auth_token``), session directory and ports, and only
its own processes are killed at the end: ``ray stop`` would end every Ray cluster on the
machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from launch.head import head_env, ray_cli
from tests.integration.helpers import REPO

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

#: ``ray start`` options for every port a head opens, so that it meets no other cluster here.
PORT_OPTIONS = (
    "--ray-client-server-port",
    "--dashboard-agent-listen-port",
    "--dashboard-agent-grpc-port",
    "--runtime-env-agent-port",
    "--node-manager-port",
    "--object-manager-port",
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _clean_env(home: Path) -> dict[str, str]:
    """The project's environment with ``home`` as ``HOME`` and no Ray auth or address set."""
    env = {**head_env(), "HOME": str(home)}
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ADDRESS"):
        env.pop(name, None)
    return env


def _processes_of(temp_dir: str) -> list[int]:
    """Ids of the processes whose command line names ``temp_dir`` (the head's own: every Ray
    process of a head carries its session directory), and of their descendants."""
    parents: dict[int, int] = {}
    mine: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
        if temp_dir.encode() in cmdline:
            mine.add(int(entry.name))
    grew = True
    while grew:
        children = {pid for pid, parent in parents.items() if parent in mine} - mine
        mine |= children
        grew = bool(children)
    mine.discard(os.getpid())
    return sorted(mine)


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    # Short and its own: Ray's socket paths live under it and must stay under 108 bytes.
    temp_dir = tempfile.mkdtemp(prefix="rh-", dir="/tmp")
    ports = {"port": _free_port(), "dashboard": _free_port(), "metrics": _free_port()}
    start = [sys.executable, "-m", "launch.head", "start", "--num-cpus", "1"]
    start += ["--port", str(ports["port"]), "--dashboard-port", str(ports["dashboard"])]
    start += ["--metrics-port", str(ports["metrics"]), "--temp-dir", temp_dir, "--"]
    for option in PORT_OPTIONS:
        start += [option, str(_free_port())]
    try:
        started = subprocess.run(
            start, cwd=REPO, env=_clean_env(home), capture_output=True, text=True, timeout=180
        )
        assert started.returncode == 0, f"{started.stdout}\n{started.stderr}"
        yield {**ports, "home": home, "printout": started.stdout}
    finally:
        for pid in _processes_of(temp_dir):
            with contextlib.suppress(ProcessLookupError):  # gone meanwhile
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(temp_dir, ignore_errors=True)


def _submit(head, env: dict[str, str], submission_id: str) -> subprocess.CompletedProcess:
    submit = [
        ray_cli(), "job", "submit", "--address", f"http://127.0.0.1:{head['dashboard']}",
        "--submission-id", submission_id, "--",
        "python", "-c", "print('the authenticated job ran')",
    ]  # fmt: skip
    return subprocess.run(submit, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def _jobs_api(head, token: str | None) -> int:
    """The HTTP status of the dashboard's job list, asked with ``token`` or without one."""
    request = urllib.request.Request(f"http://127.0.0.1:{head['dashboard']}/api/jobs/")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            json.loads(response.read())
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_head_creates_a_private_token_and_says_where(head):
    token_file = head["home"] / ".ray" / "auth_token"
    assert len(token_file.read_text()) == 64  # 256 bits, hex
    assert token_file.stat().st_mode & 0o777 == 0o600
    assert str(token_file) in head["printout"]
    assert "RAY_AUTH_MODE=token" in head["printout"]


def test_job_with_the_token_runs_and_one_without_is_refused(head, tmp_path):
    token = (head["home"] / ".ray" / "auth_token").read_text()
    with_token = {**_clean_env(head["home"]), "RAY_AUTH_MODE": "token"}
    # The head's job agent can come up a while after `ray start` returns on a busy machine
    # ("No available agent to submit job"): retry the submission until a deadline.
    deadline = time.monotonic() + 180
    while True:
        accepted = _submit(head, with_token, "with-token")
        if accepted.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(3)
    assert accepted.returncode == 0, f"{accepted.stdout}\n{accepted.stderr}"
    assert "the authenticated job ran" in accepted.stdout

    refused = _submit(head, _clean_env(tmp_path), "without-token")  # a home with no token
    assert refused.returncode != 0
    wrong = {**with_token, "RAY_AUTH_TOKEN": "0" * 64}
    assert _submit(head, wrong, "wrong-token").returncode != 0

    assert _jobs_api(head, None) == 401
    assert _jobs_api(head, "0" * 64) == 403
    assert _jobs_api(head, token) == 200
    listed = subprocess.run(
        [ray_cli(), "job", "list", "--address", f"http://127.0.0.1:{head['dashboard']}"],
        env=with_token, capture_output=True, text=True, timeout=120,
    ).stdout  # fmt: skip
    assert "with-token" in listed
    assert "without-token" not in listed and "wrong-token" not in listed
