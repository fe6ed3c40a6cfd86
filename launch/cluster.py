"""Connecting to Ray and placing the actors.

The actor classes are plain Python classes; this is the one place they become Ray actors, with
resources taken from config (``ray.remote(**resources)(RolloutWorker)``), so the same classes run
in unit tests without Ray and on a GPU cluster with ``num_gpus=1``.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.config import Config, RayConfig

logger = logging.getLogger(__name__)

PROJECT_ROOT = Path(__file__).resolve().parent.parent
ACTOR_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "VLLM_CONFIGURE_LOGGING": "0",
}


def connect(config: RayConfig) -> None:
    """Join the cluster at ``ray.address``, else a running one, else start a local one."""
    import ray

    if ray.is_initialized():
        return
    address = config.address or os.environ.get("RAY_ADDRESS", "")
    if address:
        ray.init(address=address, logging_level=logging.WARNING)
        logger.info("connected to Ray cluster at %s", address)
        return
    try:
        ray.init(address="auto", logging_level=logging.WARNING)
        logger.info("connected to the running Ray cluster")
        return
    except ConnectionError:
        pass
    ray.init(
        num_cpus=config.num_cpus or None,
        include_dashboard=False,
        logging_level=logging.WARNING,
        runtime_env={"env_vars": {"PYTHONPATH": str(PROJECT_ROOT), **ACTOR_ENV}},
    )
    logger.info("started a local Ray cluster")


@dataclass
class Fleet:
    """Handles to every actor of a run."""

    rollout: list[Any]
    learner: Any
    sandbox: Any

    def shutdown(self) -> None:
        import ray

        for handle in [*self.rollout, self.learner, self.sandbox]:
            ray.kill(handle, no_restart=True)


def _remote(cls: type, name: str, num_cpus: float, num_gpus: float = 0.0) -> Any:
    import ray

    return ray.remote(cls).options(
        name=name,
        num_cpus=num_cpus,
        num_gpus=num_gpus,
        runtime_env={"env_vars": ACTOR_ENV},
    )


def start_fleet(config: Config, model_path: str, run_id: str) -> Fleet:
    """Start the rollout workers, the learner and the sandbox pool; wait until all are ready."""
    import ray

    from actor.rollout_worker import RolloutWorker
    from learner.learner import Learner
    from sandbox.pool import SandboxPool

    sandbox = _remote(SandboxPool, f"sandbox-{run_id}", config.sandbox.num_cpus).remote(
        config.sandbox
    )
    learner = _remote(
        Learner, f"learner-{run_id}", config.learner.num_cpus, config.learner.num_gpus
    ).remote(
        model_path,
        config.learner,
        temperature=config.rollout.temperature,
        seed=config.run.seed,
        transport=config.weights.transport,
        export_dtype=config.model.dtype,
    )
    rollout = [
        _remote(
            RolloutWorker, f"rollout-{run_id}-{i}", config.rollout.num_cpus, config.rollout.num_gpus
        ).remote(model_path, config.rollout, config.model, seed=config.run.seed, worker_index=i)
        for i in range(config.rollout.num_actors)
    ]
    ray.get([handle.__ray_ready__.remote() for handle in [*rollout, learner, sandbox]])
    return Fleet(rollout=rollout, learner=learner, sandbox=sandbox)
