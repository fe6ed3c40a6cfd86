"""What the learner tests share: a tiny random Qwen2 built offline, rows to train on, and the
learner config they run with."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

import torch

from common.config import LearnerConfig
from common.types import TrainSample

if TYPE_CHECKING:
    from learner.learner import Learner

VOCAB = 128
#: The tiny model's learner settings; a test's overrides go on top (``learner_config``).
BASE_OPTIONS = {"lr": 1e-2, "micro_batch_tokens": 4096, "num_cpus": 2}


def save_tiny_qwen2(path, tie_word_embeddings: bool) -> str:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,  # vLLM's CPU attention needs head_dim in {32, 64, ...}
        max_position_embeddings=256,
        tie_word_embeddings=tie_word_embeddings,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).to(torch.bfloat16)  # served in bf16, like Qwen2.5
    model.save_pretrained(path)
    return str(path)


def tiny_samples(n: int = 8, seed: int = 0) -> list[TrainSample]:
    rng = random.Random(seed)
    samples = []
    for i in range(n):
        prompt = [rng.randrange(1, VOCAB) for _ in range(rng.randint(2, 6))]
        completion = [rng.randrange(1, VOCAB) for _ in range(rng.randint(1, 7))]
        samples.append(
            TrainSample(
                prompt_token_ids=prompt,
                completion_token_ids=completion,
                sampler_logprobs=[-4.0] * len(completion),
                advantage=[1.0, -1.0, 0.5, 0.0][i % 4],
                weight_version=0,
                group_index=i // 4,
            )
        )
    return samples


def grouped_samples(groups: int = 4, group_size: int = 4, seed: int = 0) -> list[TrainSample]:
    """G completions per prompt, as rollouts give them: prompts of different lengths (the
    first of one token),
    completions of different lengths, one row per group with an episode's feedback masked
    out (loss_mask 0 inside the completion) and one sampled at a temperature of its own."""
    rng = random.Random(seed)
    samples = []
    for g in range(groups):
        prompt = [rng.randrange(1, VOCAB) for _ in range(1 if g == 0 else rng.randint(2, 9))]
        for k in range(group_size):
            completion = [rng.randrange(1, VOCAB) for _ in range(rng.randint(1, 8))]
            mask = None
            if k == 1 and len(completion) > 2:
                mask = [1, 0] + [1] * (len(completion) - 2)
            samples.append(
                TrainSample(
                    prompt_token_ids=prompt,
                    completion_token_ids=completion,
                    sampler_logprobs=[-4.0] * len(completion),
                    advantage=rng.uniform(-1, 1),
                    weight_version=0,
                    group_index=g,
                    loss_mask=mask,
                    temperature=0.5 if k == 2 else None,
                )
            )
    return samples


def learner_config(**overrides) -> LearnerConfig:
    return LearnerConfig(**{**BASE_OPTIONS, **overrides})


def snapshot(learner: Learner) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in learner.model.named_parameters()}
