"""The learned-scorer term on the driver's side, and the tiny scorer built offline.

The model itself lives in ``actor.scorer.RewardScorer`` (its own Ray actor, CPU or GPU); the
term only ships texts to it and gets floats back. ``builtin:tiny-scorer`` is a randomly
initialised one-label Qwen2 classifier with the project's tiny tokenizer, for demos and tests
that must not download anything; its scores are noise, so it belongs in a config with a small
weight (``configs/demo_scorer.toml``), next to the execution reward.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ray

from algorithm.rewards.terms import RewardInput
from launch.data.tiny_model import build_tokenizer

TINY_SCORER = "builtin:tiny-scorer"


def build_tiny_scorer(path: str | Path, num_labels: int = 1) -> Path:
    """Write a random Qwen2 sequence classifier plus tokenizer to ``path`` (idempotent).

    ``head_dim`` 32 like the tiny policy; one layer is enough to give text-dependent scores.
    """
    # lazy: only the tiny demo scorer needs a model; the driver imports this module for ScorerTerm
    import torch
    from transformers import Qwen2Config, Qwen2ForSequenceClassification

    path = Path(path)
    if (path / "config.json").is_file() and (path / "tokenizer.json").is_file():
        return path
    tokenizer = build_tokenizer()
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        max_position_embeddings=1024,
        num_labels=num_labels,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    model = Qwen2ForSequenceClassification(config)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def resolve_scorer_path(path: str, models_dir: str | Path) -> str:
    """A local model directory for a scorer's ``path``; the builtin is built under models_dir."""
    if path == TINY_SCORER:
        return str(build_tiny_scorer(Path(models_dir) / "tiny-scorer").resolve())
    return path


class ScorerTerm:
    """A reward term backed by a scorer: a Ray actor handle or a local ``RewardScorer``."""

    def __init__(self, scorer: Any) -> None:
        self.scorer = scorer

    def __call__(self, batch: list[RewardInput]) -> list[float | None]:
        prompts = [item.problem.prompt for item in batch]
        completions = [item.completion for item in batch]
        remote = getattr(self.scorer.score, "remote", None)
        if remote is None:
            return list(self.scorer.score(prompts, completions))

        return list(ray.get(remote(prompts, completions)))
