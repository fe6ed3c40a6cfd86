"""The learner's half of the ``ipc`` transport (``common/transport/ipc.py``): vLLM's CUDA IPC
trainer engine (``IPCTrainerWeightTransferEngine``), run on every learner rank. GPU only;
without CUDA it is tested with a stand-in engine (tests/unit/common/transport/test_ipc.py).

vLLM's trainer engines drive the engines through a client. Here the driver does (as for the
``collective`` transport): the client is :class:`Capture`, which keeps the update rank 0's engine
would send, returned as a plain :class:`~common.types.WeightUpdate` for the driver to hand to
every engine. vLLM's engine drops its references to the exported tensors when ``send_weights``
returns (before our client has even started), so the copies it exports are
:class:`HeldSnapshots` that this sender keeps until the next export.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from vllm.distributed.weight_transfer.base import ParamMeta, WeightSource
from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory
from vllm.distributed.weight_transfer.ipc_engine import IPCTrainerInitInfo

from common.transport.ipc import NAME, check_update, snapshot, update_bytes
from common.types import WeightUpdate


class HeldSnapshots(WeightSource):
    """vLLM's weight source over the learner's export, each tensor a
    :func:`~common.transport.ipc.snapshot` kept in :attr:`held` so its IPC handle stays valid
    after vLLM's engine let go of it."""

    def __init__(self, learner: Any) -> None:
        self.learner = learner
        self._meta = [ParamMeta(*m) for m in learner.export_metadata()]
        self.held: list[torch.Tensor] = []

    def metadata(self) -> list[ParamMeta]:
        return self._meta

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        for name, tensor in self.learner.iter_export():  # every rank: a sharded one gathers
            copy = snapshot(tensor)
            self.held.append(copy)
            yield name, copy


class Capture:
    """vLLM's weight-sync client protocol, keeping the one update the sender ships instead of
    calling the engines (the driver hands it to them)."""

    def __init__(self) -> None:
        self.update_info: dict[str, Any] | None = None

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        """Nothing: each engine initialises itself (``common.transport.ipc.engine_init_info``)."""

    def start_weight_update(self) -> None: ...

    def update_weights(self, update_info: dict[str, Any]) -> None:
        if self.update_info is not None:  # packed mode ships one per chunk: not ours
            raise RuntimeError("the ipc sender expects one update per send (unpacked mode)")
        self.update_info = update_info

    def finish_weight_update(self, weight_version: str | None = None) -> None: ...


def learner_rank() -> int:
    """This process's rank among the learner ranks. vLLM's IPC engine all-gathers the handles
    over the default process group, which is the learner ranks' own (``learner/sharding.py``),
    so its rank there is the one the engine must be told."""
    return dist.get_rank() if dist.is_initialized() else 0


class IpcSender:
    """Learner side, every rank: export this rank's copy by IPC handles; rank 0 returns the
    update with every rank's handles, the others an update the driver ignores."""

    name = NAME
    gathers = True
    every_rank_sends = True

    def __init__(self) -> None:
        self._held: HeldSnapshots | None = None

    def send(self, source: Any) -> WeightUpdate:
        self.release()  # every engine loaded the last update before this step began
        snapshots = HeldSnapshots(source)
        client = Capture()
        engine = WeightTransferTrainerFactory.trainer_init(
            IPCTrainerInitInfo(rank=learner_rank(), packed=False),
            client=client,
            source=snapshots,
        )
        engine.send_weights()  # gathers, exports, all-gathers handles; ships on rank 0
        self._held = snapshots
        payload = client.update_info
        if payload is None:  # not the sender: its handles went into rank 0's update
            return WeightUpdate(source.weight_version, NAME, {}, 0, 0)
        check_update(payload)
        return WeightUpdate(source.weight_version, NAME, payload, update_bytes(payload), 1)

    def release(self) -> None:
        """Free the copies of the last update (after every engine loaded it) and what the
        engines' IPC views of them kept alive."""
        self._held = None
        if torch.cuda.is_available():
            torch.cuda.ipc_collect()

    @property
    def held_tensors(self) -> int:
        """How many exported copies this rank keeps for the engines (0 after release)."""
        return len(self._held.held) if self._held is not None else 0
