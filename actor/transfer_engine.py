"""The engines' side of the ``collective`` transport on CPU: a vLLM weight-transfer engine over
gloo (vLLM's own are CUDA only), registered as backend ``gloo`` by ``actor.worker_extension``.

It joins the transfer group at ``rank_offset`` plus its tensor-parallel rank, receives each
bucket of a push from learner rank 0 (``common.transport.collective``: both sides compute the
bucket layout alike) and loads it in vLLM's layerwise reload session, then re-ties the LM head
(``actor/tied_lm_head.py``). The base engine's ``update_weights`` ends with
``torch.accelerator.synchronize()``, which raises on a CPU-only torch: overridden.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from vllm.distributed.utils import (
    stateless_destroy_torch_distributed_process_group,
    stateless_init_torch_distributed_process_group,
)
from vllm.distributed.weight_transfer.base import (
    WeightTransferEngine,
    WeightTransferInitInfo,
    WeightTransferUpdateInfo,
)
from vllm.model_executor.model_loader.reload import (
    finalize_layerwise_reload,
    initialize_layerwise_reload,
)

from actor.tied_lm_head import refresh_tied_lm_head
from common.rendezvous import join_interface
from common.transport.collective import GROUP_TIMEOUT, UpdateInfo, buckets, nbytes, unpack


@dataclass
class GlooWorkerInitInfo(WeightTransferInitInfo):
    """What ``common.transport.collective.engine_init_info`` sends an engine on CPU."""

    master_address: str
    master_port: int
    rank_offset: int
    world_size: int
    bucket_bytes: int
    interface: str = ""  # gloo's sockets' network interface ('': gloo's default)


@dataclass
class GlooUpdateInfo(UpdateInfo, WeightTransferUpdateInfo):
    """The update's metadata (``common.transport.collective.UpdateInfo``) as vLLM's engine API
    types it."""


def receiver_group(init_info: GlooWorkerInitInfo, rank: int) -> Any:
    """An engine worker's gloo group with the learner, at group rank ``rank``: a client of
    rank 0's store, its own gloo sockets on the group's interface (checked to reach the store
    first: ``common.rendezvous.join_interface``)."""
    address = f"{init_info.master_address}:{init_info.master_port}"
    join_interface(address, init_info.interface)
    return stateless_init_torch_distributed_process_group(
        init_info.master_address,
        init_info.master_port,
        rank,
        init_info.world_size,
        backend="gloo",
        timeout=GROUP_TIMEOUT,
    )


class GlooWeightTransferEngine(WeightTransferEngine[GlooWorkerInitInfo, GlooUpdateInfo]):
    init_info_cls = GlooWorkerInitInfo
    update_info_cls = GlooUpdateInfo

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.group = None
        self.bucket_bytes = 0

    def init_transfer_engine(self, init_info: GlooWorkerInitInfo) -> None:
        self.bucket_bytes = init_info.bucket_bytes
        self.group = receiver_group(init_info, init_info.rank_offset + self.parallel_config.rank)

    def start_weight_update(self) -> None:
        initialize_layerwise_reload(self.model)

    def update_weights(self, update_info: dict[str, Any]) -> None:
        self.receive_weights(self.parse_update_info(update_info))

    def receive_weights(self, update_info: GlooUpdateInfo) -> None:
        if self.group is None:
            raise RuntimeError("gloo weight transfer: init_weight_transfer_engine first")
        for run in buckets(update_info, self.bucket_bytes):
            size = sum(nbytes(update_info.dtype_names[i], update_info.shapes[i]) for i in run)
            buffer = torch.empty(size, dtype=torch.uint8)
            self.group.broadcast(buffer, 0).wait()
            self.model.load_weights(unpack(buffer, update_info, run))

    def finish_weight_update(self) -> None:
        finalize_layerwise_reload(self.model, self.model_config)
        refresh_tied_lm_head(self.model)

    def shutdown(self) -> None:
        if self.group is not None:
            stateless_destroy_torch_distributed_process_group(self.group)
            self.group = None
