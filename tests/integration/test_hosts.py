"""Hosts emulated on one machine (``launch/tools/hosts.py``): a head and two workers, each with its
own address and disk, joined by ``ray start`` and given a job by ``ray job submit`` from a client
host; the demo trains across them, its engines on the workers, which fetch the model the driver
built (``common/model_files.py``); a host killed whole leaves the cluster (last: it takes a host
away from the others); ``down`` leaves nothing behind.

Marked ``cluster``: it runs last (``ray stop`` in another test ends every Ray process here).
Needs root, as namespaces and interfaces do; CI runs as root. The two training runs are marked
``hosts_run`` (about five minutes together): ``make test-cluster`` runs them, ``make test`` (and
so CI) the rest.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from common.model_files import COMPLETE
from launch.tools import hosts as emulated
from tests.integration.helpers import REPO, read_jsonl

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
        # w2 alone offers 2 CPUs: a learner asking for 2 lands there, off the driver's host
        emulated.start_cluster(hosts, cpus=1, timeout_s=NODE_TIMEOUT_S, more={"w2": 2})
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


@pytest.mark.hosts_run
def test_the_demo_learns_across_hosts_that_share_nothing_but_ray(cluster):
    out = Path.home().resolve() / "grpo-runs"  # on the head: the driver's host's own home
    job = ["python", "-m", "launch.train", "--config", "configs/demo.toml", "--overwrite"]
    job += ["--run.output_dir", str(out), "--ray.placement", "strict_spread"]
    job += ["--rollout.num_actors", "2"]  # three bundles, three hosts: the engines elsewhere
    done = _submit(cluster, *job)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for name in WORKERS:  # each engine's host fetched the model the driver built
        caches = cluster.hosts[name].home / ".cache" / "grpo-code" / "models"
        assert len(list(caches.glob(f"*/{COMPLETE}"))) == 1, name
    head_home = cluster.hosts[emulated.HEAD].home
    records = read_jsonl(head_home / out.relative_to(Path.home().resolve()) / "demo/metrics.jsonl")
    # The demo's rule (tests/integration/test_demo.py): the exact-answer rate of the last 10
    # steps at least 0.5, and 3x the 0.1 the best constant answer earns.
    exact = statistics.fmean(r["reward/pass_rate"] for r in records[-10:])
    assert len(records) == 300 and exact >= 0.5, exact


def test_an_unreachable_interface_ends_the_run_in_one_line(cluster):
    # The group's store on the head's loopback: a learner rank on another host reaches its own
    # loopback instead, and stops the run within seconds; before the check it waited for the
    # store for the group's timeout, half an hour, and failed without saying where.
    job = ["python", "-m", "launch.train", "--config", "configs/demo.toml", "--overwrite"]
    job += ["--run.steps", "3", "--learner.num_ranks", "2", "--ray.placement", "strict_spread"]
    job += ["--ray.group_interface", "lo"]  # two ranks, one engine: a host each
    done = _submit(cluster, *job)
    assert done.returncode != 0
    # ray job submit prints the job's output, then its tail again with the job's status
    errors = sorted({line for line in done.stdout.splitlines() if line.startswith("error: ")})
    assert len(errors) == 1, done.stdout[-3000:]
    assert re.fullmatch(
        r"error: learner-demo\S* could not start: ray\.group_interface: (w1|w2) cannot reach "
        r"the group's store at 127\.0\.0\.1:\d+ through interface 'lo' \(127\.0\.0\.1\) within "
        r"10 s \(Connection refused\); name the interface of the cluster's network "
        r"\(docs/cluster\.md, Networking\)",
        errors[0],
    ), errors[0]


@pytest.mark.hosts_run
def test_checkpoints_reach_the_drivers_host_and_a_resume_elsewhere_reads_them(cluster):
    out = Path.home().resolve() / "grpo-runs"  # the head's own home, as above
    run = ["python", "-m", "launch.train"]
    first = [*run, "--config", "configs/demo.toml", "--overwrite", "--run.name", "ckpt"]
    first += ["--run.output_dir", str(out), "--run.steps", "6", "--run.checkpoint_every", "3"]
    first += ["--learner.num_cpus", "2"]  # only w2 offers 2 CPUs: the learner is there
    done = _submit(cluster, *first)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    head, w2 = cluster.hosts[emulated.HEAD].home, cluster.hosts["w2"].home
    run_dir = head / out.relative_to(Path.home().resolve()) / "ckpt"
    saved = run_dir / "checkpoints" / "step-0000006"
    assert {"model.safetensors", "optimizer.pt", "learner_state.json"} <= {
        p.name for p in saved.iterdir()
    }
    assert not [p for p in (w2 / "grpo-runs").rglob("*") if p.is_file()]  # no copy left there
    resumed = _submit(cluster, *run, "--resume", str(out / "ckpt"), "--run.steps", "9")
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    records = read_jsonl(run_dir / "metrics.jsonl")
    assert [r["step"] for r in records] == list(range(1, 10))
    # w2 fetched the checkpoint it resumed from into its cache (beside the models it fetched)
    cache = w2 / ".cache" / "grpo-code" / "models"
    fetched = [
        p.parent for p in cache.glob(f"*/{COMPLETE}") if (p.parent / "driver_state.json").exists()
    ]
    assert len(fetched) == 1
    assert json.loads((fetched[0] / "learner_state.json").read_text())["step"] == 6


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
