"""The ``cpu_safetensors`` transport's wire format: the full weights (HF names, serving dtype,
LoRA merged) in safetensors buckets of at most ``weights.bucket_mib``, in state-dict order, as
one object in Ray's object store that every rollout worker reads (so it works across nodes).

The receiver (``actor/receivers.py``) hands its engine one bucket per ``collective_rpc`` call
(bytes pass through it in multiprocess mode, tensors cannot), loaded inside one vLLM
layerwise-reload session (``actor/worker_extension.py``), so the engine holds one bucket, not a
second copy of the model; an update of one bucket skips the session (``actor/direct_load.py``).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from safetensors.torch import load, save

from common.types import WeightUpdate

NAME = "cpu_safetensors"


def split_buckets(
    tensors: dict[str, torch.Tensor], bucket_bytes: int
) -> list[dict[str, torch.Tensor]]:
    """Consecutive groups of ``tensors`` (their order kept) of at most ``bucket_bytes`` each;
    a tensor bigger than a bucket is a bucket of its own. Never empty for non-empty input."""
    buckets: list[dict[str, torch.Tensor]] = []
    current: dict[str, torch.Tensor] = {}
    size = 0
    for name, tensor in tensors.items():
        nbytes = tensor.numel() * tensor.element_size()
        if current and size + nbytes > bucket_bytes:
            buckets.append(current)
            current, size = {}, 0
        current[name] = tensor
        size += nbytes
    if current:
        buckets.append(current)
    return buckets


def encode_update(
    tensors: dict[str, torch.Tensor], version: int, bucket_bytes: int
) -> WeightUpdate:
    """The update carrying ``tensors`` as weight version ``version``, in buckets of at most
    ``bucket_bytes``."""
    contiguous = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
    metadata = {"weight_version": str(version)}
    blobs = [save(b, metadata=metadata) for b in split_buckets(contiguous, bucket_bytes)]
    return WeightUpdate(
        version=version,
        transport=NAME,
        payload=blobs,
        num_bytes=sum(len(blob) for blob in blobs),
        buckets=len(blobs),
    )


def decode_bucket(blob: bytes) -> list[tuple[str, torch.Tensor]]:
    """Engine side: one bucket as ``(name, tensor)`` pairs for vLLM's loader."""
    return list(load(bytes(blob)).items())


def decode_update(update: WeightUpdate) -> Iterator[tuple[str, torch.Tensor]]:
    """Every ``(name, tensor)`` of an update, bucket after bucket."""
    if update.transport != NAME:
        raise ValueError(f"not a {NAME} update: {update.transport!r}")
    for blob in update.payload:
        yield from decode_bucket(blob)
