"""The learner's half of each weight transport, chosen by the transport's name.

The wire formats are in ``common/transport/``; the senders read the policy from the learner (a
:class:`~common.transport.WeightSource`) and return the plain update the driver hands on. The
two that go through vLLM's weight-transfer API live in their own modules.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from common.transport import (
    DEFAULT_BUCKET_BYTES,
    WeightSender,
    WeightSource,
    check_transport,
    cpu_safetensors,
    ipc,
    lora_adapter,
)
from common.types import WeightUpdate


class CpuSafetensorsSender:
    """Serialises the policy into bounded safetensors buckets
    (``common.transport.cpu_safetensors``)."""

    name = cpu_safetensors.NAME
    gathers = True
    every_rank_sends = False

    def __init__(self, bucket_bytes: int = DEFAULT_BUCKET_BYTES) -> None:
        if bucket_bytes < 1:
            raise ValueError(f"bucket size must be positive, got {bucket_bytes} bytes")
        self.bucket_bytes = bucket_bytes

    def send(self, source: WeightSource) -> WeightUpdate:
        tensors = source.export_tensors()
        return cpu_safetensors.encode_update(tensors, source.weight_version, self.bucket_bytes)


class LoraAdapterSender:
    """Saves the adapter of each weight version in its own directory
    (``common.transport.lora_adapter``)."""

    name = lora_adapter.NAME
    gathers = False  # reads the adapter alone (refused with several learner ranks)
    every_rank_sends = False

    def __init__(self, adapter_dir: str | None = None) -> None:
        self.adapter_dir = Path(adapter_dir or tempfile.mkdtemp(prefix="grpo-adapters-"))

    def send(self, source: WeightSource) -> WeightUpdate:
        version = source.weight_version
        # newer ones: from a longer run before; older ones: past the KEEP both sides hold
        gone = lambda v: v >= version or v <= version - lora_adapter.KEEP  # noqa: E731
        for path in lora_adapter.versions(self.adapter_dir, gone):
            shutil.rmtree(path, ignore_errors=True)
        path = self.adapter_dir / f"v{version:06d}"
        source.save_adapter(str(path))
        files = {f.name: f.read_bytes() for f in sorted(path.iterdir()) if f.is_file()}
        size = sum(len(data) for data in files.values())
        return WeightUpdate(version, self.name, files, num_bytes=size)


def make_sender(
    name: str, *, bucket_bytes: int = DEFAULT_BUCKET_BYTES, adapter_dir: str | None = None
) -> WeightSender:
    """The learner's half of transport ``name``."""
    check_transport(name)
    if name == cpu_safetensors.NAME:
        return CpuSafetensorsSender(bucket_bytes)
    if name == lora_adapter.NAME:
        return LoraAdapterSender(adapter_dir)
    # lazy: vLLM's trainer engines; vLLM is absent where the learner runs alone
    if name == ipc.NAME:
        from learner.ipc_sender import IpcSender

        return IpcSender()
    from learner.collective_sender import CollectiveSender

    return CollectiveSender(bucket_bytes)
