"""Only the LoRA adapter travels (``learner.lora.export = "adapter"``): a few MB a step instead
of the whole model.

Sender: the learner saves the adapter in peft's format to ``<adapter_dir>/v{version:06d}``, a
directory on a file system every rollout node can read (the run directory by default), one per
weight version and never overwritten, so an engine still loading version k is not handed half
of version k + 1. The one just written and the one before it are kept (an engine may still be
reading the previous one); older ones go, and so do newer ones, which a resumed run (its
version back at the checkpoint's) or an overwritten one left behind.

Receiver: the engine (started with LoRA enabled, ``Config.served_lora_rank``) serves the
adapter as a vLLM ``LoRARequest`` named in every request from then on, with a new adapter id
per version so vLLM never serves a cached copy of an older one. Nothing is loaded at receive
time: vLLM reads the adapter with the first request that names it.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from common.transport import WeightSource
from common.types import WeightUpdate

NAME = "lora_adapter"
#: Adapter versions kept on disk (see the module docstring).
KEEP = 2


class LoraAdapterSender:
    """Saves the adapter of each weight version in its own directory (module docstring)."""

    name = NAME
    gathers = False  # reads the adapter alone (refused with several learner ranks)

    def __init__(self, adapter_dir: str | None = None) -> None:
        self.adapter_dir = Path(adapter_dir or tempfile.mkdtemp(prefix="grpo-adapters-"))

    @classmethod
    def from_options(cls, adapter_dir: str | None, **_: Any) -> LoraAdapterSender:
        return cls(adapter_dir)

    def send(self, source: WeightSource) -> WeightUpdate:
        version = source.weight_version
        path = self.adapter_dir / f"v{version:06d}"
        for stale in self._versions(lambda v: v >= version):  # from a longer run before
            shutil.rmtree(stale, ignore_errors=True)
        source.save_adapter(str(path))
        for old in self._versions(lambda v: v <= version - KEEP):
            shutil.rmtree(old, ignore_errors=True)
        size = sum(f.stat().st_size for f in path.iterdir())
        return WeightUpdate(version, self.name, str(path), num_bytes=size)

    def _versions(self, wanted) -> list[Path]:
        """Adapter directories ``v<version>`` whose version satisfies ``wanted``."""
        found = []
        for path in self.adapter_dir.glob("v*"):
            digits = path.name[1:]
            if path.is_dir() and digits.isdigit() and wanted(int(digits)):
                found.append(path)
        return found


class LoraAdapterReceiver:
    """Switches the engine's requests to the newest adapter (module docstring)."""

    name = NAME

    def __init__(self) -> None:
        self._adapter = None

    def receive(self, llm: Any, update: WeightUpdate) -> dict[str, float]:
        from vllm.lora.request import LoRARequest

        # vLLM adapter ids must be positive; one per weight version.
        self._adapter = LoRARequest(f"v{update.version}", update.version + 1, update.payload)
        return {"direct_load": 0.0}

    def adapter(self) -> Any:
        return self._adapter
