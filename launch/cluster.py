"""Connecting to Ray: the run's cluster, and the environment every actor of it gets.

Actors are created in :mod:`launch.actors`.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from common.config import RayConfig

logger = logging.getLogger(__name__)

PROJECT_ROOT = Path(__file__).resolve().parent.parent
ACTOR_ENV = {
    "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"),
    "TOKENIZERS_PARALLELISM": "false",
    "VLLM_CONFIGURE_LOGGING": "0",
}


def connect(config: RayConfig) -> None:
    """Join ``ray.address``, else the cluster of ``RAY_ADDRESS`` or of the last ``ray start`` on
    this machine, else start a local cluster in this process.

    Deliberately not ``ray.init(address="auto")``: its legacy fallback joins *any* Ray process
    found on the machine, such as another local run's in-process cluster, and this run would
    then die when that one finishes.
    """
    import ray
    from ray._private.services import get_ray_address_from_environment

    if ray.is_initialized():
        return
    address = config.address or get_ray_address_from_environment(None, None)
    if address:
        ray.init(address=address, logging_level=logging.WARNING)
        logger.info("connected to the Ray cluster at %s", address)
        return
    ray.init(
        num_cpus=config.num_cpus or None,
        include_dashboard=False,
        logging_level=logging.WARNING,
        runtime_env={"env_vars": {"PYTHONPATH": str(PROJECT_ROOT), **ACTOR_ENV}},
    )
    logger.info("started a local Ray cluster")
