"""Where a model named by the user comes from: a local directory, or the Hugging Face hub.

Checked once on the driver, before any actor starts, so a model that cannot be loaded costs one
clear line instead of a transformers ``OSError`` traceback from inside an actor. ``launch``
defaults to ``HF_HUB_OFFLINE=1`` (no download behind the user's back, and CI machines have no
network), so a hub name must already be in the local cache, or the user opts into downloading.
"""

from __future__ import annotations

import os
from pathlib import Path

from common.config import ConfigError


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").strip().lower() in ("1", "true", "yes", "on")


def locate_model(path: str, field: str = "model.path") -> str:
    """``path`` when transformers and vLLM can load it from here; else a ConfigError naming
    ``field`` and the ways out (a local directory, a download, or the hub switched on)."""
    local = Path(path).expanduser()
    if local.is_dir():
        if not (local / "config.json").is_file():
            raise ConfigError(f"{field}: {path} has no config.json: not a Hugging Face model")
        return str(local)
    if local.exists():
        raise ConfigError(f"{field}: {path} is a file; give the model's directory")
    if path.startswith((".", "/", "~")) or path.count("/") != 1:
        raise ConfigError(
            f"{field}: {path} is not a local directory, nor a Hugging Face hub name (owner/name)"
        )
    # lazy: needed for a hub name only; launch.train imports this module to check model.path
    from huggingface_hub import try_to_load_from_cache

    if isinstance(try_to_load_from_cache(path, "config.json"), str):
        return path  # in the local cache: loads offline
    if hub_offline():
        raise ConfigError(
            f"{field}: {path} is neither a local directory nor in the local Hugging Face cache, "
            f"and the hub is off (HF_HUB_OFFLINE=1): download it first (hf download {path}) "
            "or give its local directory; HF_HUB_OFFLINE=0 lets the run download it"
        )
    return path
