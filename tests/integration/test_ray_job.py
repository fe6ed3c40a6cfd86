"""``ray job submit`` against a real head with the dashboard; metrics reach Prometheus.

Runs last (see conftest): it starts and stops a Ray head, and ``ray stop`` stops every Ray
process on the machine.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.request

import pytest

from launch.head import head_env, ray_cli
from tests.integration.helpers import REPO

pytestmark = [pytest.mark.integration, pytest.mark.cluster]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _scrape(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.read().decode()
    except OSError:
        return ""


@pytest.fixture(scope="module")
def head():
    import ray

    ray.shutdown()  # leave the in-process cluster of earlier tests
    ports = {"port": _free_port(), "dashboard": _free_port(), "metrics": _free_port()}
    start = ["python", "-m", "launch.head", "start", "--num-cpus", "2"]
    start += ["--port", str(ports["port"]), "--dashboard-port", str(ports["dashboard"])]
    start += ["--metrics-port", str(ports["metrics"])]
    # Report metrics every second (Ray's default is slower) so a short job is seen.
    env = {**head_env(), "RAY_metrics_report_interval_ms": "1000"}
    subprocess.run(start, cwd=REPO, env=env, check=True, timeout=180)
    yield ports
    subprocess.run([ray_cli(), "stop", "--force"], env=head_env(), timeout=120)


def test_job_submit_succeeds_and_exports_grpo_metrics(head, tmp_path):
    env = {**head_env(), "RAY_AUTH_MODE": "token"}
    address = f"http://127.0.0.1:{head['dashboard']}"
    submit = [
        ray_cli(), "job", "submit", "--address", address, "--no-wait",
        "--submission-id", "grpo-test-job", "--working-dir", ".", "--",
        "python", "-m", "launch.train", "--config", "configs/demo.toml",
        "--run.output_dir", str(tmp_path), "--run.name", "job", "--run.steps", "20",
        "--rollout.batch_size", "32", "--rollout.num_cpus", "0.5",
        "--rollout.kv_cache_gib", "0.1", "--ray.placement", "pack",
    ]  # fmt: skip
    # The head's job agent can come up a while after `ray start` returns on a busy machine
    # ("No available agent to submit job"): retry the submission until a deadline.
    deadline = time.monotonic() + 180
    while True:
        proc = subprocess.run(submit, cwd=REPO, env=env, capture_output=True, text=True)
        if proc.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(3)
    assert proc.returncode == 0, f"ray job submit failed:\n{proc.stdout}\n{proc.stderr}"

    metrics_url = f"http://127.0.0.1:{head['metrics']}/metrics"
    status_cmd = [ray_cli(), "job", "status", "--address", address, "grpo-test-job"]
    seen_metrics, status = "", ""
    deadline = time.monotonic() + 480
    while time.monotonic() < deadline:
        scraped = _scrape(metrics_url)
        if "ray_grpo_reward_mean" in scraped:
            seen_metrics = scraped
        status = subprocess.run(status_cmd, env=env, capture_output=True, text=True).stdout.upper()
        if any(word in status for word in ("SUCCEEDED", "FAILED", "STOPPED")):
            break
        time.sleep(2)
    logs = subprocess.run(
        [ray_cli(), "job", "logs", "--address", address, "grpo-test-job"],
        env=env, capture_output=True, text=True,
    ).stdout  # fmt: skip
    assert "SUCCEEDED" in status, f"job status: {status}\n--- job logs ---\n{logs[-4000:]}"
    assert "ray_grpo_reward_mean" in seen_metrics, "no grpo_ metric on the Prometheus endpoint"
    assert "ray_grpo_train_loss" in seen_metrics
    assert (tmp_path / "job" / "metrics.jsonl").is_file()
    assert os.path.getsize(tmp_path / "job" / "checkpoint" / "model.safetensors") > 0
