"""The ``collective`` transport's wire format: learner rank 0 broadcasts the weights to every
engine worker in one process group, through vLLM 0.32's native weight-transfer API (``nccl`` on
GPU; on CPU ``gloo``, ``actor/transfer_engine.py``, ours: vLLM's are CUDA only). The update the
driver moves is metadata only (an :class:`UpdateInfo`); the tensors never enter Ray's object
store. The group's layout and its faults: docs/cluster.md (Weight transports).

Here is what both sides must agree on without vLLM: the group's parameters
(:func:`engine_init_info`), the update's metadata and how it is cut into broadcasts
(:func:`buckets`, :func:`pack`, :func:`unpack`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch

from common.rendezvous import split_address

NAME = "collective"
#: How long a member waits in one broadcast (or to form the group) before it fails: a member
#: that died mid-push must not hold the others for gloo's default half hour.
GROUP_TIMEOUT = timedelta(minutes=5)


def backend_for(num_gpus: float) -> str:
    """vLLM's NCCL engine where the engines have GPUs, the project's gloo engine on CPU."""
    return "nccl" if num_gpus > 0 else "gloo"


def engine_init_info(
    backend: str,
    address: str,
    rank_offset: int,
    world_size: int,
    bucket_bytes: int,
    interface: str = "",
) -> dict[str, Any]:
    """What ``init_weight_transfer_engine`` takes for an engine whose first worker has group
    rank ``rank_offset`` (the wire parameters match the learner's side; ``interface``: the
    network interface gloo uses, '' for its default)."""
    host, port = split_address(address)
    info: dict[str, Any] = {
        "master_address": host,
        "master_port": port,
        "rank_offset": rank_offset,
        "world_size": world_size,
    }
    if backend == "nccl":
        return {**info, "packed": True}  # NCCLTrainerInitInfo's default
    return {**info, "bucket_bytes": bucket_bytes, "interface": interface}


@dataclass
class UpdateInfo:
    """One push's parameters, in the order they are broadcast (vLLM's NCCL update info has
    the same three fields)."""

    names: list[str]
    dtype_names: list[str]
    shapes: list[list[int]]


def buckets(info: UpdateInfo, bucket_bytes: int) -> list[list[int]]:
    """Consecutive parameter indices, each run at most ``bucket_bytes`` (a larger tensor goes
    alone): one broadcast each, laid out alike on both sides from the update info."""
    runs: list[list[int]] = []
    size = 0
    for i, (dtype, shape) in enumerate(zip(info.dtype_names, info.shapes, strict=True)):
        tensor_bytes = nbytes(dtype, shape)
        if runs and size + tensor_bytes <= bucket_bytes:
            runs[-1].append(i)
            size += tensor_bytes
        else:
            runs.append([i])
            size = tensor_bytes
    return runs


def nbytes(dtype_name: str, shape: list[int]) -> int:
    """Bytes of one tensor of the update."""
    return torch.Size(shape).numel() * getattr(torch, dtype_name).itemsize


def pack(tensors: list[torch.Tensor]) -> torch.Tensor:
    """One flat byte tensor of ``tensors`` (contiguous, on CPU)."""
    return torch.cat([t.contiguous().view(-1).view(torch.uint8) for t in tensors])


def unpack(buffer: torch.Tensor, info: UpdateInfo, run: list[int]) -> list[tuple[str, Any]]:
    """The named tensors of bucket ``run`` from its received bytes."""
    out, offset = [], 0
    for i in run:
        dtype, shape = getattr(torch, info.dtype_names[i]), info.shapes[i]
        tensor_bytes = nbytes(info.dtype_names[i], shape)
        tensor = buffer[offset : offset + tensor_bytes].view(dtype).view(shape)
        out.append((info.names[i], tensor))
        offset += tensor_bytes
    return out
