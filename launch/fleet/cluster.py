"""Connecting to Ray: the run's cluster, and the environment every actor of it gets.

Actors are created in :mod:`launch.fleet.actors`.
"""

from __future__ import annotations

import logging
import math
import os
import socket
from pathlib import Path

import ray
from ray._private.services import get_ray_address_from_environment
from ray._private.utils import get_num_cpus

from common.config import ConfigError, RayConfig

logger = logging.getLogger(__name__)

PROJECT_ROOT = Path(__file__).resolve().parents[2]  # launch/fleet/cluster.py -> the project
ACTOR_ENV = {
    "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"),
    "TOKENIZERS_PARALLELISM": "false",
    "VLLM_CONFIGURE_LOGGING": "0",
}
#: How long a cluster's address may take to accept a connection before the run is refused:
#: at an address where nothing listens, ray.init retries silently for minutes.
REACH_TIMEOUT_S = 10.0
LAST_RAY_START = "the last `ray start` on this machine"


def connect(config: RayConfig, requested_cpus: float = 0) -> None:
    """Join ``ray.address``, else the cluster of ``RAY_ADDRESS`` or of the last ``ray start`` on
    this machine, else start a local cluster in this process.

    A local cluster offers ``ray.num_cpus`` logical CPUs, by default the machine's cores, or
    what the run's actors ask for (``requested_cpus``) when that is more: on a small machine the
    actors then share its cores instead of waiting for CPUs that will never come.

    Deliberately not ``ray.init(address="auto")``: its legacy fallback joins *any* Ray process
    found on the machine, such as another local run's in-process cluster, and this run would
    then die when that one finishes.
    """
    if ray.is_initialized():
        return
    address = checked_address(config)
    if address:
        ray.init(address=address, logging_level=logging.WARNING)
        logger.info("connected to the Ray cluster at %s", address)
        return
    cores = get_num_cpus()  # what Ray would offer: cgroup limits included
    num_cpus = config.num_cpus or max(cores, math.ceil(requested_cpus))
    if not config.num_cpus and num_cpus > cores:
        logger.warning(
            "the run's actors ask for %g CPUs and this machine has %d: the local Ray cluster "
            "offers %d, so they share the cores (set ray.num_cpus to choose)",
            requested_cpus,
            cores,
            num_cpus,
        )
    ray.init(
        num_cpus=num_cpus,
        include_dashboard=False,
        logging_level=logging.WARNING,
        runtime_env={
            "env_vars": {"PYTHONPATH": str(PROJECT_ROOT), **ACTOR_ENV},
            # the actors' own log lines formatted as the driver's, so its console shows them
            "worker_process_setup_hook": "launch.console.worker_logging",
        },
    )
    logger.info("started a local Ray cluster")


def checked_address(config: RayConfig) -> str:
    """The address :func:`connect` joins ('' when it starts a local cluster), refused in one
    line (ConfigError) when nothing answers there; a run checks it before it touches its
    directory."""
    address = config.address or get_ray_address_from_environment(None, None) or ""
    if address:
        found = "RAY_ADDRESS" if os.environ.get("RAY_ADDRESS") else LAST_RAY_START
        check_reachable(address, "ray.address" if config.address else found)
    return address


def check_reachable(address: str, field: str) -> None:
    """Refuse (ConfigError naming ``field``) a ``host:port`` or ``ray://host:port`` address
    that accepts no connection within REACH_TIMEOUT_S; other forms (a dashboard's http://
    address, say) are Ray's to judge and explain."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if "://" in host or not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=REACH_TIMEOUT_S).close()
    except OSError as exc:
        way_out = "start the head there (ray start --head), or give its address"
        if field == LAST_RAY_START:
            way_out = "that cluster is gone: `ray stop` clears its address, or give ray.address"
        raise ConfigError(
            f"{field}: nothing answers at {address} ({exc.strerror or exc}): {way_out}"
        ) from None
