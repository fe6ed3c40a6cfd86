"""How new policy weights travel from the learner to every rollout engine.

Both ends share this module so ``learner/`` never imports ``actor/``: the learner calls
``make_sender(name).send(tensors, version)`` and gets a plain :class:`WeightUpdate` back; the
driver hands that update to every rollout worker, whose engine-side receiver decodes it with
:func:`decode_update`.

Transports, by placement:

- ``cpu_safetensors`` (tested here): the tensors are serialised with safetensors into buckets
  of at most ``weights.bucket_mib`` each (in state-dict order, so layers complete one after the
  other; a tensor bigger than a bucket travels alone). The update is one object in Ray's object
  store that every rollout worker reads, so it works across nodes; each worker hands its engine
  one bucket per ``collective_rpc`` call, and the engine decodes and loads it inside one vLLM
  layerwise-reload session (the lifecycle of vLLM's own weight-transfer engines: initialise,
  ``load_weights`` per chunk, finalise). The engine process therefore holds one bucket, not
  the whole model a second time, however big the model (an update of one bucket skips the
  session, see ``actor/direct_load.py``). Tensors cannot be passed through ``collective_rpc``
  in multiprocess mode, bytes can.
- ``lora_adapter``: with ``learner.lora.export = "adapter"`` only the adapter travels, as a
  directory on a file system the engines can read (a few MB instead of the whole model).
- GPU transports (NCCL between separate GPUs, CUDA IPC when colocated) through vLLM 0.32's
  native weight-transfer API are not implemented yet.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

import torch

from common.types import WeightUpdate


class WeightSender(Protocol):
    """Learner side of a transport."""

    name: str

    def send(self, tensors: dict[str, torch.Tensor], version: int) -> WeightUpdate: ...


#: Default bound on one bucket of a ``cpu_safetensors`` update (``weights.bucket_mib``).
DEFAULT_BUCKET_BYTES = 16 << 20


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
    """Serialise the state dict into bounded safetensors buckets (see the module docstring)."""

    name = "cpu_safetensors"

    def __init__(self, bucket_bytes: int = DEFAULT_BUCKET_BYTES) -> None:
        if bucket_bytes < 1:
            raise ValueError(f"bucket size must be positive, got {bucket_bytes} bytes")
        self.bucket_bytes = bucket_bytes

    def send(self, tensors: dict[str, torch.Tensor], version: int) -> WeightUpdate:
        from safetensors.torch import save

        contiguous = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
        metadata = {"weight_version": str(version)}
        blobs = [save(b, metadata=metadata) for b in split_buckets(contiguous, self.bucket_bytes)]
        return WeightUpdate(
            version=version,
            transport=self.name,
            payload=blobs,
            num_bytes=sum(len(blob) for blob in blobs),
        )


_SENDERS = {CpuSafetensorsSender.name: CpuSafetensorsSender}

#: A LoRA adapter saved by the learner (``payload`` is its directory): the engines load it as a
#: vLLM LoRA adapter with a new adapter id, instead of receiving merged full weights.
LORA_ADAPTER = "lora_adapter"


def make_sender(name: str, bucket_bytes: int = DEFAULT_BUCKET_BYTES) -> WeightSender:
    """Build the learner-side sender for the transport named in ``weights.transport``."""
    try:
        sender = _SENDERS[name]
    except KeyError:
        raise ValueError(f"unknown weight transport {name!r}; known: {sorted(_SENDERS)}") from None
    return sender(bucket_bytes)


def decode_bucket(transport: str, blob: bytes) -> list[tuple[str, torch.Tensor]]:
    """Engine side: one bucket of an update as ``(name, tensor)`` pairs for vLLM's loader."""
    if transport != CpuSafetensorsSender.name:
        raise ValueError(f"this engine cannot receive transport {transport!r}")
    from safetensors.torch import load

    return list(load(bytes(blob)).items())


def decode_update(update: WeightUpdate) -> Iterator[tuple[str, torch.Tensor]]:
    """Every ``(name, tensor)`` of an update, bucket after bucket."""
    assert isinstance(update.payload, list)
    for blob in update.payload:
        yield from decode_bucket(update.transport, blob)
