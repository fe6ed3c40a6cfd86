"""learner.memory_gib: the learner derives its micro-batch token budget from a memory target
and the model's shape (common/memory/arithmetic.py), and refuses a target below its state."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from common.config import LearnerConfig
from common.memory.arithmetic import (
    GIB,
    ModelShape,
    activation_bytes_per_token,
    learner_state,
    logit_bytes,
)
from common.types import TrainSample
from learner.learner import Learner


def _target_for(model_path: str, config: LearnerConfig, tokens: int) -> float:
    """The memory_gib whose derived budget is ``tokens`` on a CPU learner (the derivation run
    backwards: its reference dtype and shared prompts as the CPU resolves them)."""
    shape = ModelShape.from_config(json.loads((Path(model_path) / "config.json").read_text()))
    state = learner_state(shape, config, device="cpu")
    fixed = state.backward + logit_bytes(shape, config, 1 << 18)
    per_token = activation_bytes_per_token(shape, config, device="cpu")
    return (fixed + tokens * per_token + 1) / GIB


def test_the_budget_comes_from_the_memory_target_and_is_logged(tiny_model_path, caplog):
    config = LearnerConfig(num_cpus=1)
    config = config.model_copy(update={"memory_gib": _target_for(tiny_model_path, config, 700)})
    with caplog.at_level(logging.INFO, logger="learner.learner"):
        learner = Learner(tiny_model_path, config)
    assert learner.trainer.micro_batch_tokens == 700
    assert "micro-batches of 700 tokens" in caplog.text


def test_without_a_target_the_fixed_budget_stays(tiny_model_path):
    learner = Learner(tiny_model_path, LearnerConfig(num_cpus=1, micro_batch_tokens=1234))
    assert learner.trainer.micro_batch_tokens == 1234


def test_a_target_below_the_state_is_refused(tiny_model_path):
    with pytest.raises(ValueError, match=r"learner\.memory_gib \(0\.1\) cannot hold"):
        Learner(tiny_model_path, LearnerConfig(num_cpus=1, memory_gib=0.1))


def _samples(count: int) -> list[TrainSample]:
    return [
        TrainSample(
            prompt_token_ids=[5 + i // 2, 6, 7],
            completion_token_ids=[8, 9 + i],
            sampler_logprobs=[-4.0, -4.0],
            advantage=1.0 if i % 2 else -1.0,
            weight_version=0,
            group_index=i // 2,
        )
        for i in range(count)
    ]


@pytest.mark.parametrize("target", [True, False])
def test_a_step_reports_the_budget_the_layers_and_the_micro_batches(tiny_model_path, target):
    """What the budget and the checkpointing resolved to is in every step's metrics
    (train/micro_batch_tokens, train/checkpointed_layers), and the micro-batches the batch
    took, counted by the learner's own plan: one at a 700-token budget derived from a memory
    target, several at a fixed 16 tokens."""
    config = LearnerConfig(num_cpus=1, gradient_checkpointing=1, share_prompts=False)
    if target:
        budget = 700
        config = config.model_copy(update={"memory_gib": _target_for(tiny_model_path, config, 700)})
    else:
        budget = 16
        config = config.model_copy(update={"micro_batch_tokens": 16})
    learner = Learner(tiny_model_path, config)
    samples = _samples(8)
    metrics = learner.train_step(samples)
    assert metrics["train/micro_batch_tokens"] == budget
    assert metrics["train/checkpointed_layers"] == 1
    planned = learner.trainer.ranks.plan(samples, budget, False).micro_batches
    # 8 samples of 5 tokens: all in one at 700, three to a micro-batch at 16
    assert metrics["train/micro_batches"] == len(planned) == (1 if target else 3)
    assert "train/peak_memory_gib" not in metrics  # CUDA only
