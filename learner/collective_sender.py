"""The learner's half of the ``collective`` transport (``common/transport/collective.py``): a
vLLM trainer engine (``WeightTransferTrainerFactory``) over :class:`ExportSource`.

vLLM's trainer engines drive the engines themselves through a client. Here the driver does (it
owns the actors, and keeps the learner and the engines ignorant of each other), so the client is
:class:`DriverPaced`, which does nothing: the driver queues each engine's receive and the
learner's :meth:`CollectiveSender.transmit` at the same time, and they meet in the broadcast.
The :class:`~common.types.WeightUpdate` the learner returns is metadata only. On GPU the engine
is vLLM's NCCL one; on CPU it is :class:`GlooTrainerWeightTransferEngine`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import torch
from vllm.distributed.utils import (
    stateless_destroy_torch_distributed_process_group,
    stateless_init_torch_distributed_process_group,
)
from vllm.distributed.weight_transfer.base import (
    ParamMeta,
    TrainerInitInfo,
    TrainerWeightTransferEngine,
    WeightSource,
)
from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory
from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerInitInfo

from common.rendezvous import listen, split_address, take, use_interface
from common.transport.collective import (
    GROUP_TIMEOUT,
    NAME,
    UpdateInfo,
    buckets,
    nbytes,
    pack,
)
from common.types import WeightUpdate


@dataclass
class GlooTrainerInitInfo(TrainerInitInfo):
    backend: ClassVar[str] = "gloo"
    master_address: str
    master_port: int
    world_size: int
    bucket_bytes: int


def sender_group(host: str, port: int, world_size: int) -> Any:
    """Learner rank 0's gloo group with the engines, rank 0 of it, serving the group's store on
    the socket held since the address was picked (``common.rendezvous.hold``), else bound now."""
    held = take(f"{host}:{port}")
    if held is not None:
        use_interface(held.interface)
    return stateless_init_torch_distributed_process_group(
        host,
        port,
        0,
        world_size,
        backend="gloo",
        listen_socket=held.socket if held is not None else listen(host, port),
        timeout=GROUP_TIMEOUT,
    )


class ExportSource(WeightSource):
    """vLLM's weight source over the learner's export; its metadata is read once."""

    def __init__(self, learner: Any) -> None:
        self.learner = learner
        self._meta = [ParamMeta(*m) for m in learner.export_metadata()]

    def metadata(self) -> list[ParamMeta]:
        return self._meta

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        return self.learner.iter_export()


def update_info(source: WeightSource) -> UpdateInfo:
    meta = source.metadata()
    return UpdateInfo(
        names=[m.name for m in meta],
        dtype_names=[str(m.dtype).removeprefix("torch.") for m in meta],
        shapes=[list(m.shape) for m in meta],
    )


class DriverPaced:
    """vLLM's weight-sync client protocol, doing nothing: the driver calls the engines."""

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None: ...

    def start_weight_update(self) -> None: ...

    def update_weights(self, update_info: Any) -> None: ...

    def finish_weight_update(self, weight_version: str | None = None) -> None: ...


class GlooTrainerWeightTransferEngine(TrainerWeightTransferEngine[GlooTrainerInitInfo]):
    """The learner's side on CPU: rank 0 broadcasts each bucket over a gloo group that holds
    it and every engine worker; the other learner ranks only walk the source (their gathers)."""

    init_info_cls = GlooTrainerInitInfo

    @classmethod
    def trainer_init(cls, init_info, *, client, source=None):
        engine = cls(client=client, source=source, is_sender=init_info.is_sender)
        engine.bucket_bytes = init_info.bucket_bytes
        engine.group = None
        if engine.is_sender:
            engine.group = sender_group(
                init_info.master_address, init_info.master_port, init_info.world_size
            )
        return engine

    def send_weights(self) -> None:
        """Walk the whole source on every learner rank (each step of the walk is a gather all
        ranks take part in); rank 0 broadcasts each bucket.

        A failed broadcast (an engine died) does not stop rank 0's walk, or the other ranks
        would wait in their next gather until the group's timeout: rank 0 closes the group (so
        the waiting engines fail at once), walks on, and raises once every rank is back in step.
        """
        assert self.source is not None
        info = update_info(self.source)
        pairs = iter(self.source)
        failure: Exception | None = None
        for run in buckets(info, self.bucket_bytes):
            tensors = []
            for i in run:
                name, tensor = next(pairs)
                wanted = (info.names[i], info.dtype_names[i], info.shapes[i])
                got = (name, str(tensor.dtype).removeprefix("torch."), list(tensor.shape))
                if got != wanted:  # the engines would cut the bytes elsewhere: fail, not hang
                    raise ValueError(f"weight source yielded {got}, its metadata says {wanted}")
                tensors.append(tensor)
            if self.is_sender and failure is None:
                try:
                    self.group.broadcast(pack(tensors), 0).wait()
                except RuntimeError as exc:  # gloo's error for a peer that went away
                    failure = exc
                    self.close()
        if failure is not None:
            raise RuntimeError(f"the broadcast to the engines failed: {failure}") from failure

    def close(self) -> None:
        if self.group is not None:
            stateless_destroy_torch_distributed_process_group(self.group)
            self.group = None


# The trainer side of the project's CPU engine (vLLM's own are CUDA only); the engines' side
# registers in vLLM's worker processes (``actor/worker_extension.py``).
if "gloo" not in WeightTransferTrainerFactory._registry:
    WeightTransferTrainerFactory.register_engine("gloo", GlooTrainerWeightTransferEngine)


class CollectiveSender:
    """Learner side: metadata out through the driver, tensors through the group."""

    name = NAME
    gathers = False  # send() reads metadata only; transmit() walks the weights on every rank
    every_rank_sends = False

    def __init__(self, bucket_bytes: int) -> None:
        self.bucket_bytes = bucket_bytes
        self.engine: TrainerWeightTransferEngine | None = None

    def send(self, source: Any) -> WeightUpdate:
        info = update_info(ExportSource(source))
        num_bytes = sum(nbytes(d, s) for d, s in zip(info.dtype_names, info.shapes, strict=True))
        runs = len(buckets(info, self.bucket_bytes))
        return WeightUpdate(source.weight_version, NAME, asdict(info), num_bytes, runs)

    def join(self, source: Any, backend: str, address: str, world_size: int, rank: int) -> None:
        """Enter the transfer group (learner rank 0 at group rank 0; the other learner ranks
        only take part in the gathers); blocks until every engine worker joined."""
        self.leave()
        host, port = split_address(address)
        if backend == "nccl":
            held = take(address)
            if held is not None:  # vLLM's NCCL engine binds the port itself, on host alone
                use_interface(held.interface)
                held.socket.close()
            init_info = NCCLTrainerInitInfo(host, port, world_size, rank=rank)
        else:
            init_info = GlooTrainerInitInfo(host, port, world_size, self.bucket_bytes, rank=rank)
        self.engine = WeightTransferTrainerFactory.trainer_init(
            init_info, client=DriverPaced(), source=ExportSource(source)
        )

    def leave(self) -> None:
        """Release the group joined before, if any (the group is formed again whenever the
        fleet changes)."""
        engine, self.engine = self.engine, None
        if isinstance(engine, GlooTrainerWeightTransferEngine):
            engine.close()
        elif getattr(engine, "model_update_group", None) is not None:
            engine.model_update_group.destroy()  # vLLM's NCCL communicator

    def transmit(self) -> float:
        """Broadcast the current weights (every learner rank calls it, while every engine
        receives); returns the seconds it took. After a failed broadcast rank 0 has no group
        until it is formed again (the driver does, as it recovers the engines)."""
        # gloo's sender closes its group after a failed broadcast; vLLM's NCCL one keeps it
        lost = getattr(self.engine, "group", True) is None
        if self.engine is None or (self.engine.is_sender and lost):
            raise RuntimeError("the collective transport has no group: join it first")
        start = time.perf_counter()
        self.engine.send_weights()
        return time.perf_counter() - start
