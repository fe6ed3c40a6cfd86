"""The engines' half of each weight transport, chosen by the transport's name: a receiver loads
an update (wire formats: ``common/transport/``) into its rollout worker's live vLLM engine.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from common.transport import (
    WeightReceiver,
    check_transport,
    collective,
    cpu_safetensors,
    ipc,
    lora_adapter,
)
from common.types import WeightUpdate


class _OwnWeights:
    """A receiver that replaces the engine's own weights: requests run without an adapter."""

    def adapter(self) -> None:
        return None


class CpuSafetensorsReceiver(_OwnWeights):
    """Hands the engine one bucket per call; the engine's worker extension loads it
    (``actor/worker_extension.py``)."""

    name = cpu_safetensors.NAME

    def receive(self, llm: Any, update: WeightUpdate) -> dict[str, float]:
        buckets = update.payload
        direct = False
        for i, bucket in enumerate(buckets):
            first, last = i == 0, i == len(buckets) - 1
            args = (bucket, update.version, first, last)
            loads = llm.collective_rpc("receive_weights_bucket", args=args)
            direct = all(load["direct"] for load in loads)
        return {"direct_load": float(direct)}  # 1: loaded without vLLM's layerwise session


class LoraAdapterReceiver:
    """Switches the engine's requests to the newest adapter (``common.transport.lora_adapter``)."""

    name = lora_adapter.NAME

    def __init__(self) -> None:
        self._adapter = None
        self._dir = Path(tempfile.mkdtemp(prefix="grpo-adapters-"))  # this engine's own disk

    def receive(self, llm: Any, update: WeightUpdate) -> dict[str, float]:
        # lazy: importing vLLM reads its environment, which the rollout worker sets first
        from vllm.lora.request import LoRARequest

        path = lora_adapter.write(self._dir, update.version, update.payload)
        # vLLM adapter ids must be positive; one per weight version.
        self._adapter = LoRARequest(f"v{update.version}", update.version + 1, str(path))
        return {"direct_load": 0.0}

    def adapter(self) -> Any:
        return self._adapter


class CollectiveReceiver(_OwnWeights):
    """vLLM's weight-update session around the worker engine's receive
    (``common.transport.collective``; the CPU engine is ``actor/transfer_engine.py``)."""

    name = collective.NAME

    def __init__(self) -> None:
        self.joined = False

    def join(self, llm: Any, init_info: dict[str, Any]) -> None:
        if self.joined:  # the group is formed again: release the old one first
            llm.shutdown_weight_transfer_engine()
        llm.init_weight_transfer_engine({"init_info": init_info})
        self.joined = True

    def receive(self, llm: Any, update: WeightUpdate) -> dict[str, float]:
        return _update_session(llm, update, time.perf_counter())


def _update_session(llm: Any, update: WeightUpdate, start: float) -> dict[str, float]:
    """One weight update through vLLM's weight-transfer API; ``load_s`` since ``start``."""
    llm.start_weight_update()
    llm.update_weights({"update_info": update.payload})
    llm.finish_weight_update()
    return {"load_s": time.perf_counter() - start}


class IpcReceiver(_OwnWeights):
    """vLLM's weight-update session around its CUDA IPC engine (``common.transport.ipc``): the
    engine opens the handle for its own GPU in the update and loads what the learner rank on
    that GPU exported. GPU only; the order of the calls is tested with a stand-in engine."""

    name = ipc.NAME

    def __init__(self) -> None:
        self.initialised = False

    def receive(self, llm: Any, update: WeightUpdate) -> dict[str, float]:
        ipc.check_update(update.payload)
        start = time.perf_counter()
        if not self.initialised:  # no group to form: the engine only learns the wire mode
            llm.init_weight_transfer_engine({"init_info": ipc.engine_init_info()})
            self.initialised = True
        return _update_session(llm, update, start)


_RECEIVERS = {
    receiver.name: receiver
    for receiver in (CpuSafetensorsReceiver, LoraAdapterReceiver, CollectiveReceiver, IpcReceiver)
}


def make_receiver(name: str) -> WeightReceiver:
    """A rollout worker's half of transport ``name``."""
    check_transport(name)
    return _RECEIVERS[name]()
