"""How new policy weights travel from the learner to every rollout engine.

Both ends share this module so ``learner/`` never imports ``actor/``: the learner calls
``make_sender(name).send(tensors, version)`` and gets a plain :class:`WeightUpdate` back; the
driver hands that update to every rollout worker, whose engine-side receiver decodes it with
:func:`decode_update`.

Transports, by placement:

- ``cpu_safetensors`` (tested here): the tensors are serialised once with safetensors into
  bytes. The driver puts them in Ray's object store once and every rollout worker reads the same
  object, so it works across nodes; inside the engine the bytes are fed to vLLM's layerwise
  reload. Tensors cannot be passed through vLLM's ``collective_rpc`` in multiprocess mode, bytes
  can.
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


class CpuSafetensorsSender:
    """Serialise the full state dict into safetensors bytes (one buffer, one copy)."""

    name = "cpu_safetensors"

    def send(self, tensors: dict[str, torch.Tensor], version: int) -> WeightUpdate:
        from safetensors.torch import save

        contiguous = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
        blob = save(contiguous, metadata={"weight_version": str(version)})
        return WeightUpdate(version=version, transport=self.name, payload=blob, num_bytes=len(blob))


_SENDERS = {CpuSafetensorsSender.name: CpuSafetensorsSender}

#: A LoRA adapter saved by the learner (``payload`` is its directory): the engines load it as a
#: vLLM LoRA adapter with a new adapter id, instead of receiving merged full weights.
LORA_ADAPTER = "lora_adapter"


def make_sender(name: str) -> WeightSender:
    """Build the learner-side sender for the transport named in ``weights.transport``."""
    try:
        return _SENDERS[name]()
    except KeyError:
        raise ValueError(f"unknown weight transport {name!r}; known: {sorted(_SENDERS)}") from None


def decode_update(update: WeightUpdate) -> Iterator[tuple[str, torch.Tensor]]:
    """Engine side: turn an update back into ``(name, tensor)`` pairs for vLLM's loader."""
    if update.transport != CpuSafetensorsSender.name:
        raise ValueError(f"this engine cannot receive transport {update.transport!r}")
    from safetensors.torch import load

    assert isinstance(update.payload, bytes)
    yield from load(update.payload).items()
