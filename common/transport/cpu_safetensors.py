"""The full weights in bounded safetensors buckets, through Ray's object store.

Sender: the policy's tensors (HF names, serving dtype, LoRA merged) are serialised into buckets
of at most ``weights.bucket_mib`` each, in state-dict order so layers complete one after the
other (a tensor bigger than a bucket travels alone). The update is one object in Ray's object
store that every rollout worker reads, so it works across nodes.

Receiver: the worker hands its engine one bucket per ``collective_rpc`` call (tensors cannot
pass through ``collective_rpc`` in multiprocess mode, bytes can), and the engine decodes and
loads it inside one vLLM layerwise-reload session (``actor/worker_extension.py``): the
lifecycle of vLLM's own weight-transfer engines (initialise, ``load_weights`` per chunk,
finalise). The engine process therefore holds one bucket, not the whole model a second time,
however big the model; an update of one bucket skips the session (``actor/direct_load.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from common.transport import DEFAULT_BUCKET_BYTES, WeightSource
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


class CpuSafetensorsSender:
    """Serialise the policy into bounded safetensors buckets (see the module docstring)."""

    name = NAME
    gathers = True

    def __init__(self, bucket_bytes: int = DEFAULT_BUCKET_BYTES) -> None:
        if bucket_bytes < 1:
            raise ValueError(f"bucket size must be positive, got {bucket_bytes} bytes")
        self.bucket_bytes = bucket_bytes

    @classmethod
    def from_options(cls, bucket_bytes: int, **_: Any) -> CpuSafetensorsSender:
        return cls(bucket_bytes)

    def send(self, source: WeightSource) -> WeightUpdate:
        return self.encode(source.export_tensors(), source.weight_version)

    def encode(self, tensors: dict[str, torch.Tensor], version: int) -> WeightUpdate:
        """The update carrying ``tensors`` as weight version ``version``."""
        from safetensors.torch import save

        contiguous = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
        metadata = {"weight_version": str(version)}
        blobs = [save(b, metadata=metadata) for b in split_buckets(contiguous, self.bucket_bytes)]
        return WeightUpdate(
            version=version,
            transport=self.name,
            payload=blobs,
            num_bytes=sum(len(blob) for blob in blobs),
            buckets=len(blobs),
        )


class CpuSafetensorsReceiver:
    """Hands the engine one bucket per call; the engine's worker extension loads it."""

    name = NAME

    def receive(self, llm: Any, update: WeightUpdate) -> dict[str, float]:
        buckets = update.payload
        direct = False
        for i, bucket in enumerate(buckets):
            first, last = i == 0, i == len(buckets) - 1
            args = (bucket, update.version, first, last)
            loads = llm.collective_rpc("receive_weights_bucket", args=args)
            direct = all(load["direct"] for load in loads)
        return {"direct_load": float(direct)}  # 1: loaded without vLLM's layerwise session

    def adapter(self) -> None:
        return None  # the engine's own weights were replaced


def decode_bucket(blob: bytes) -> list[tuple[str, torch.Tensor]]:
    """Engine side: one bucket as ``(name, tensor)`` pairs for vLLM's loader."""
    from safetensors.torch import load

    return list(load(bytes(blob)).items())


def decode_update(update: WeightUpdate) -> Iterator[tuple[str, torch.Tensor]]:
    """Every ``(name, tensor)`` of an update, bucket after bucket."""
    if update.transport != NAME:
        raise ValueError(f"not a {NAME} update: {update.transport!r}")
    for blob in update.payload:
        yield from decode_bucket(blob)
