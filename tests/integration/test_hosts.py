"""Hosts emulated on one machine (``launch/tools/hosts.py``): a head and two workers, each with its
own address and disk, joined by ``ray start`` and given a job by ``ray job submit`` from a client
host; a host killed whole leaves the cluster; ``down`` leaves nothing behind.

Marked ``cluster``: it runs last (``ray stop`` in another test ends every Ray process here).
Needs root, as namespaces and interfaces do; CI runs as root.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from launch.tools import hosts as emulated
from tests.integration.helpers import REPO

pytestmark = [
    pytest.mark.integration,
    pytest.mark.cluster,
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root"),
]
WORKERS = ("w1", "w2")
NODE_TIMEOUT_S = 120.0  # a node joins in seconds here; Ray marks a dead one in ~30


@pytest.fixture(scope="module")
def cluster():
    hosts = emulated.Hosts()
    try:
        hosts.make(len(WORKERS))
        emulated.start_cluster(hosts, cpus=1, timeout_s=NODE_TIMEOUT_S)
        yield hosts
    finally:
        hosts.down()


def _submit(hosts: emulated.Hosts, *entrypoint: str) -> subprocess.CompletedProcess:
    """``ray job submit`` from the client host, the checkout as the job's working directory."""
    head = hosts.hosts[emulated.HEAD]
    ray = str(Path(sys.prefix) / "bin" / "ray")
    address = f"http://{head.address}:{emulated.DASHBOARD_PORT}"
    argv = [ray, "job", "submit", "--address", address, "--working-dir", ".", "--", *entrypoint]
    client = hosts.hosts[emulated.CLIENT]
    env = emulated.token_env(client)
    return hosts.run(client.name, argv, env=env, cwd=REPO, capture_output=True, text=True)


def test_each_host_has_its_own_address_name_and_disk(cluster):
    job = ["python", "tests/integration/hosts_probe.py", str(REPO), "head", *WORKERS]
    done = _submit(cluster, *job)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("PROBE "))
    seen = json.loads(line.removeprefix("PROBE "))
    assert seen["driver"]["name"] == "head"  # a submitted job's driver runs on the head
    for index, name in enumerate(["head", *WORKERS]):
        assert seen[name]["name"] == name
        assert seen[name]["address"] == emulated.address_of(index)
        assert seen[name]["checkout_write"] == "Read-only file system"
    # The driver's file is on the head's disk, and only there.
    assert [seen[n]["sees_marker"] for n in ("head", *WORKERS)] == [True, False, False]


def test_a_host_killed_whole_leaves_the_cluster(cluster):
    assert len(emulated.alive_nodes(cluster)) == 1 + len(WORKERS)
    cluster.kill("w2")
    remaining = emulated.wait_for_nodes(cluster, 1 + len(WORKERS) - 1, NODE_TIMEOUT_S)
    assert emulated.address_of(2) not in remaining
    assert emulated.address_of(1) in remaining


def test_down_leaves_no_namespace_interface_process_or_disk():
    hosts = emulated.Hosts()
    hosts.make(1)
    sleeper = subprocess.Popen(
        emulated.command(hosts.hosts["w1"], ["sh", "-c", "echo in; exec sleep 600"]),
        stdout=subprocess.PIPE,
    )
    assert sleeper.stdout.readline() == b"in\n"  # inside the host: down() must kill it
    hosts.down()
    assert sleeper.wait(timeout=30) == -9
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not [line for line in listed.splitlines() if line.startswith(f"{emulated.PREFIX}-")]
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    assert f" {emulated.PREFIX}-" not in links
    assert not emulated.STATE.exists()
