"""The collective transport, engine by engine: learner rank 0 broadcasts to a real vLLM-CPU
engine through vLLM's weight-transfer API, and the engine then serves the learner's weights.

A module of its own: an in-process engine that goes away tears down vLLM's per-process state,
which another module's shared in-process engine would still be living on. ``launch.train``'s
runs (``test_modes.py``) and ``test_fleet_push.py`` cover the transport with learner ranks and
several engines.
"""

from __future__ import annotations

import pytest

from common.config import LearnerConfig, ModelConfig, RolloutConfig
from tests.integration.test_weight_push import (
    BF16_TOLERANCE,
    _engine_logprobs,
    _mean_abs_diff,
    _perturb,
    _sample,
)

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    # Two workers in vLLM's own engine process: an in-process engine with worker processes
    # tears down vLLM's per-process state on shutdown, which this module's shared in-process
    # engine lives on (a rollout actor holds one engine; launch.train's runs cover "actor").
    ("engine_process", "workers"),
    [("actor", 1), ("separate", 1), ("separate", 2)],
)
def test_collective_push_makes_engine_logprobs_match_the_learner(
    tiny_model_path, engine_process, workers
):
    """weights.transport = "collective": the update is metadata only, the tensors go from the
    learner to the engine in a gloo broadcast through vLLM's weight-transfer API (the
    project's engine, registered in vLLM's worker, in its own process with "separate"; in two
    tensor-parallel worker processes, each at its own group rank, with 2 workers), in many
    16 KiB buckets, and the engine then serves the learner's weights."""
    import threading

    from actor.rollout_worker import RolloutWorker
    from bench.learner.perturb import PerturbableLearner
    from common.rendezvous import LOOPBACK, hold, interface_of
    from common.transport.collective import engine_init_info

    rollout = RolloutConfig(
        batch_size=8,
        group_size=8,
        max_new_tokens=8,
        kv_cache_gib=0.1,
        engine_process=engine_process,
        tensor_parallel_size=workers,
        num_cpus=workers,
    )
    worker = RolloutWorker(
        tiny_model_path, rollout, ModelConfig(max_model_len=128), transport="collective"
    )
    learner = PerturbableLearner(
        tiny_model_path, LearnerConfig(num_cpus=1), transport="collective", bucket_bytes=16 << 10
    )

    def beside(call) -> threading.Thread:  # the learner's side, while the engine takes part
        errors: list[BaseException] = []
        thread = threading.Thread(target=lambda: _capture(call, errors))
        thread.errors = errors
        thread.start()
        return thread

    # Learner rank 0 is this process: it serves the group's store, on loopback alone.
    interface = interface_of(LOOPBACK)
    address = hold(LOOPBACK, interface)
    world = 1 + workers
    joining = beside(lambda: learner.join_transfer("gloo", address, world))
    worker.join_transfer(engine_init_info("gloo", address, 1, world, 16 << 10, interface))
    joining.join()
    assert not joining.errors
    sample = _sample(worker, "# Return the number 4.\n", "4 + 5 * w\nprint(answer())")
    for seed in (31, 32):  # two pushes: the group carries more than one
        _perturb(learner, seed)
        changed = learner.score([sample])[0]
        assert _mean_abs_diff(_engine_logprobs(worker, sample), changed) > 10 * BF16_TOLERANCE
        update = learner.export_weights()
        assert update.transport == "collective" and update.buckets > 5
        assert set(update.payload) == {"names", "dtype_names", "shapes"}  # no tensors
        sending = beside(learner.transmit)
        worker.update_weights(update)
        sending.join()
        assert not sending.errors
        assert worker.weight_version == update.version == learner.weight_version
        assert _mean_abs_diff(_engine_logprobs(worker, sample), changed) < BF16_TOLERANCE
    if engine_process == "separate":
        worker.llm.llm_engine.engine_core.shutdown()


def _capture(call, errors: list) -> None:
    try:
        call()
    except BaseException as exc:  # the test asserts there is none
        errors.append(exc)
