"""What the benchmark tools share: the ``[bench]`` section of a config, the random benchmark
model it describes, and a private Ray cluster to measure on."""

from __future__ import annotations

import json
import logging
import os
import tomllib
from pathlib import Path
from typing import Any

from common.config import Config, ConfigError, apply_overrides, validate_config
from launch.data.tiny_model import build_tokenizer

logger = logging.getLogger("bench.launch")

BENCH_DEFAULTS: dict[str, Any] = {
    "steps": 4,  # including the warm-up steps
    "warmup": 1,
    "fixed_length": True,
    "engines": [1, 2, 4, 8],  # timeline predictions
    "overlap_reward": False,  # timeline: rewards streamed during generation
    "trl_grad_accum": 4,
    "trl_threads": 2,
    "trl_niceness": 15,  # Ray's default worker niceness (RAY_worker_niceness)
    "model": {
        "name": "bench-20m",
        "hidden_size": 512,
        "num_layers": 8,
        "num_heads": 8,
        "num_kv_heads": 4,
        "head_dim": 64,
        "intermediate_size": 1408,
        "vocab_size": 128,
        "tie_word_embeddings": True,
        "seed": 0,
    },
}


# ---- configuration ---------------------------------------------------------------------------


def load_bench_config(path: str | None, overrides: list[str]) -> tuple[Config, dict[str, Any]]:
    """The training config and the ``[bench]`` section (defaults filled in), both validated."""
    data: dict = {}
    if path is not None:
        if not Path(path).is_file():
            raise ConfigError(f"config file {path} does not exist")
        data = tomllib.loads(Path(path).read_text())
    data = apply_overrides(data, overrides)
    bench = _merge(BENCH_DEFAULTS, data.pop("bench", {}))
    if bench["warmup"] >= bench["steps"]:
        raise ConfigError(
            f"bench: steps ({bench['steps']}) must exceed warmup ({bench['warmup']}): "
            "the warm-up steps are not measured"
        )

    return validate_config(data), bench


def _merge(defaults: dict, given: dict) -> dict:
    out = dict(defaults)
    for key, value in given.items():
        if key not in defaults:
            raise ConfigError(f"bench.{key}: unknown key (one of {', '.join(defaults)})")
        out[key] = _merge(defaults[key], value) if isinstance(defaults[key], dict) else value
    return out


# ---- the benchmark model ---------------------------------------------------------------------


def model_parameters(spec: dict[str, Any]) -> int:
    """Parameter count of the Qwen2 model ``spec`` describes (biases on q/k/v, RMSNorm gains)."""
    h, layers, inter = spec["hidden_size"], spec["num_layers"], spec["intermediate_size"]
    q = spec["num_heads"] * spec["head_dim"]
    kv = spec["num_kv_heads"] * spec["head_dim"]
    attention = h * q + q + 2 * (h * kv + kv) + q * h
    per_layer = attention + 3 * h * inter + 2 * h
    embed = spec["vocab_size"] * h * (1 if spec["tie_word_embeddings"] else 2)
    return layers * per_layer + embed + h


def build_bench_model(root: str | Path, spec: dict[str, Any]) -> Path:
    """A random Qwen2 model with ``spec``'s shape and the tiny tokenizer, built once."""
    # lazy: the bench CLIs import this module; --help and config errors answer first
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    path = Path(root) / "_models" / spec["name"]
    marker = path / "bench_model.json"
    if marker.is_file() and json.loads(marker.read_text()) == spec:
        return path.resolve()
    tokenizer = build_tokenizer(spec["vocab_size"])
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=spec["hidden_size"],
        intermediate_size=spec["intermediate_size"],
        num_hidden_layers=spec["num_layers"],
        num_attention_heads=spec["num_heads"],
        num_key_value_heads=spec["num_kv_heads"],
        head_dim=spec["head_dim"],
        max_position_embeddings=2048,
        tie_word_embeddings=spec["tie_word_embeddings"],
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="bfloat16",
    )
    torch.manual_seed(spec["seed"])
    model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    marker.write_text(json.dumps(spec))
    logger.info("built %s: %.1fM parameters", path, model.num_parameters() / 1e6)
    return path.resolve()


# ---- our system ------------------------------------------------------------------------------


def connect_own(config: Config) -> None:
    """A Ray cluster of our own unless an address is given.

    ``launch.fleet.cluster.connect`` joins any cluster already running on the machine; on a shared
    machine that would put the benchmark's actors on someone else's cluster (and its load on
    ours), so without ``ray.address`` / ``RAY_ADDRESS`` the benchmark starts a private one.
    """
    # lazy: Ray (also under launch.fleet.cluster), as in build_bench_model
    import ray

    from launch.fleet.cluster import ACTOR_ENV, PROJECT_ROOT, connect

    if config.ray.address or os.environ.get("RAY_ADDRESS"):
        connect(config.ray)
        return
    for attempt in range(3):  # a loaded machine sometimes times a raylet's start-up out
        try:
            ray.init(
                address="local",
                num_cpus=config.ray.num_cpus or None,
                include_dashboard=False,
                logging_level=logging.WARNING,
                runtime_env={"env_vars": {"PYTHONPATH": str(PROJECT_ROOT), **ACTOR_ENV}},
            )
            return
        except Exception as exc:
            if attempt == 2:
                raise
            logger.warning("starting a local Ray cluster failed (%s); retrying", exc)
            ray.shutdown()
