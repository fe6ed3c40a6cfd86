"""Where a model named by the user comes from: a local directory, or the Hugging Face hub.

Checked once on the driver, before any actor starts, so a model that cannot be loaded costs one
clear line instead of a traceback from inside an actor. ``launch`` defaults to
``HF_HUB_OFFLINE=1`` (no download behind the user's back), so a hub name must already be in the
local cache, or the user opts into downloading. A hub name always reaches the actors as a local
directory: they run offline, and each node fetching its own copy would download it once per
node; the driver downloads it once, where every node reads it.
"""

from __future__ import annotations

import os
from pathlib import Path

from common.config import ConfigError

#: Written into a download directory once the whole snapshot is in: a directory without it
#: may hold half a model (an interrupted download), which a later offline run must not use.
DOWNLOADED = ".downloaded"


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").strip().lower() in ("1", "true", "yes", "on")


def locate_model(path: str, field: str = "model.path", download_dir: Path | None = None) -> str:
    """A directory transformers and vLLM can load ``path`` from; else a ConfigError naming
    ``field`` and the ways out (a local directory, a download, or the hub switched on).

    A hub name resolves to its snapshot in the local cache, else to its copy in
    ``download_dir`` (``<owner>--<name>``), downloaded there now when the hub is on. Without a
    ``download_dir`` an uncached name is returned as it is, for callers that load the model in
    this process (which may then download it into the cache).
    """
    if not path.strip():
        raise ConfigError(f"{field} is empty: give a model directory or a Hugging Face hub name")
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
    target = None if download_dir is None else Path(download_dir) / path.replace("/", "--")
    if target is not None and (target / DOWNLOADED).is_file():
        return str(target)
    cached = cached_snapshot(path)
    if cached is not None:
        return cached
    if hub_offline():
        raise ConfigError(
            f"{field}: {path} is neither a local directory nor in the local Hugging Face cache, "
            f"and the hub is off (HF_HUB_OFFLINE=1): download it first (hf download {path}) "
            "or give its local directory; HF_HUB_OFFLINE=0 lets the run download it"
        )
    if target is None:
        return path
    return download(path, target, field)


def cached_snapshot(repo_id: str) -> str | None:
    """The snapshot directory of ``repo_id``'s main revision in the local Hugging Face cache
    (``HF_HUB_CACHE``), when it holds the model's config.json; else None. Never goes online."""
    # lazy: needed for a hub name only; launch.train imports this module to check model.path
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        folder = snapshot_download(repo_id, local_files_only=True)
    except LocalEntryNotFoundError:
        return None
    return folder if (Path(folder) / "config.json").is_file() else None


def download(repo_id: str, target: Path, field: str = "model.path") -> str:
    """Download ``repo_id``'s snapshot into ``target`` (resuming a partial one; the hub's
    progress bars show) and mark it complete; a failure is a ConfigError naming ``field``."""
    # lazy: as in cached_snapshot
    from huggingface_hub import snapshot_download

    try:
        snapshot_download(repo_id, local_dir=target)
    except Exception as exc:  # any hub or network error: one line for the user, not a traceback
        raise ConfigError(
            f"{field}: cannot download {repo_id} from the hub: {first_line(exc)}"
        ) from None
    if not (target / "config.json").is_file():
        raise ConfigError(f"{field}: {repo_id} on the hub has no config.json: not a model")
    (target / DOWNLOADED).write_text(repo_id + "\n")
    return str(target)


def model_tokenizer(path: str, field: str = "model.path"):
    """The tokenizer of the model directory ``path``, once what the engines and the learner
    load from it has been checked; else a ConfigError naming ``field``: no tokenizer files
    (transformers then loads a tokenizer that knows only its special tokens, and the run would
    train on nonsense), a ``config.json`` transformers cannot read (an unknown ``model_type``),
    or a weights file whose header is not safetensors'."""
    from safetensors import safe_open  # lazy: torch and transformers take seconds to import
    from transformers import AutoConfig, AutoTokenizer

    local = Path(path)
    try:
        AutoConfig.from_pretrained(path)
        tokenizer = AutoTokenizer.from_pretrained(path)
    except Exception as exc:  # OSError, ValueError, KeyError...: whatever the files make it raise
        raise ConfigError(f"{field}: cannot load {path}: {first_line(exc)}") from None
    if len(tokenizer) <= len(tokenizer.all_special_tokens):
        raise ConfigError(f"{field}: {path} has no tokenizer files (tokenizer.json, vocab.json...)")
    for weights in sorted(local.glob("*.safetensors")):
        try:
            with safe_open(weights, "pt"):
                pass
        except Exception as exc:  # safetensors raises its own error types for a bad header
            raise ConfigError(f"{field}: {weights} is not a safetensors file: {exc}") from None
    return tokenizer


def first_line(error: Exception) -> str:
    """An error's first line of text (its type's name when it has none): one line for the user."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
