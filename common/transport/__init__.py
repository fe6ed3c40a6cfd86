"""How new policy weights travel from the learner to every rollout engine: the interface.

A transport is a pair: a :class:`WeightSender` on the learner, which reads the policy from a
:class:`WeightSource` and returns a plain :class:`WeightUpdate`, and a :class:`WeightReceiver`
in the rollout worker, which loads that update into its live vLLM engine. The driver only moves
the update between them (one object in Ray's object store, read by every worker), so
``learner/`` and ``actor/`` never import each other. This package holds what both halves
share: these protocols, the transports' names (:data:`TRANSPORTS`), and each transport's wire
format, one file each, whose docstring says how it travels; the senders are in
``learner/senders.py`` (the vLLM one in ``learner/collective_sender.py``), the receivers in
``actor/receivers.py``. A new transport is a wire file here, a sender there and a receiver
there, each side choosing by name.
"""

from __future__ import annotations

from typing import Any, Protocol

from torch import Tensor

from common.config import LoraConfig
from common.types import WeightUpdate

#: Default bound on one bucket of a ``cpu_safetensors`` update (``weights.bucket_mib``).
DEFAULT_BUCKET_BYTES = 16 << 20

#: Every transport, by the name its updates carry (``WeightUpdate.transport``).
TRANSPORTS = ("cpu_safetensors", "lora_adapter", "collective", "ipc")


class WeightSource(Protocol):
    """What a sender reads from the learner."""

    @property
    def weight_version(self) -> int: ...

    def export_tensors(self) -> dict[str, Tensor]:
        """The whole policy as the engines load it: HF names, serving dtype, LoRA merged."""
        ...

    def save_adapter(self, directory: str) -> None:
        """The LoRA adapter alone, in peft's format, written to ``directory``."""
        ...


class WeightSender(Protocol):
    """Learner side of a transport."""

    name: str
    #: Whether ``send`` reads the whole policy (``export_tensors``): the learner ranks that do
    #: not send gather it too, as a sharded policy's gathers are collectives.
    gathers: bool
    #: Whether every learner rank calls ``send`` (each rank's copy serves the engine on its own
    #: GPU: ``ipc``); else rank 0 alone sends and the others only gather (``gathers``).
    every_rank_sends: bool

    def send(self, source: WeightSource) -> WeightUpdate: ...


class WeightReceiver(Protocol):
    """Rollout side of a transport, one per engine."""

    name: str

    def receive(self, llm: Any, update: WeightUpdate) -> dict[str, float]:
        """Load ``update`` into the live engine ``llm`` (a ``vllm.LLM``); load metrics back."""
        ...

    def adapter(self) -> Any:
        """What every request must name to be served the received weights: a vLLM
        ``LoRARequest``, or None when the engine's own weights were replaced."""
        ...


def check_transport(name: str) -> None:
    """Refuse a transport name neither side knows (each side then picks its half by name)."""
    if name not in TRANSPORTS:
        known = sorted(TRANSPORTS)
        raise ValueError(f"unknown weight transport {name!r}; known: {known}")


def transport_for(transport: str, lora: LoraConfig) -> str:
    """The transport a run uses: the adapter alone when LoRA exports adapters
    (``learner.lora.export = "adapter"``), else ``weights.transport``."""
    return "lora_adapter" if lora.enabled and lora.export == "adapter" else transport
