"""The ``lora_adapter`` transport's wire format: only the LoRA adapter travels
(``learner.lora.export = "adapter"``): its peft files by name (``adapter_config.json``,
``adapter_model.safetensors``), through Ray's object store like any update, so no file system
need be shared between the learner and the engines.

Each side writes a weight version's adapter into a directory of its own, never overwritten, so
a request still reading version k is not handed half of version k + 1; the one just written and
the one before it are kept (an engine may still be reading the previous one), older ones go.
The engine (started with LoRA, ``Config.served_lora_rank``) names the adapter in every request
as a vLLM ``LoRARequest``, with a new adapter id per version so vLLM never serves a cached copy
of an older one; vLLM reads it with the first request that names it.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

NAME = "lora_adapter"
#: Adapter versions kept on disk, on each side (the module docstring says why two).
KEEP = 2


def versions(directory: Path, wanted: Callable[[int], bool]) -> list[Path]:
    """Adapter directories ``v<version>`` in ``directory`` whose version satisfies ``wanted``."""
    found = []
    for path in directory.glob("v*"):
        digits = path.name[1:]
        if path.is_dir() and digits.isdigit() and wanted(int(digits)):
            found.append(path)
    return found


def write(directory: Path, version: int, files: dict[str, bytes]) -> Path:
    """Weight ``version``'s adapter ``files`` into ``directory/v<version>``, the versions
    before the last :data:`KEEP` removed; the new directory."""
    path = directory / f"v{version:06d}"
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    for name, data in files.items():
        (path / Path(name).name).write_bytes(data)  # a bare name: nothing written elsewhere
    for old in versions(directory, lambda v: v <= version - KEEP):
        shutil.rmtree(old, ignore_errors=True)
    return path
