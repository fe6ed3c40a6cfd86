"""learner.memory_gib: the learner derives its micro-batch token budget from a memory target
and the model's shape (common/memory.py), and refuses a target below its state."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from common.config import LearnerConfig
from common.memory import (
    GIB,
    ModelShape,
    activation_bytes_per_token,
    learner_state,
    logit_bytes,
)
from learner.learner import Learner


def _target_for(model_path: str, config: LearnerConfig, tokens: int) -> float:
    """The memory_gib whose derived budget is ``tokens`` (the derivation run backwards)."""
    shape = ModelShape.from_config(json.loads((Path(model_path) / "config.json").read_text()))
    fixed = learner_state(shape, config).backward + logit_bytes(shape, config, 1 << 18)
    return (fixed + tokens * activation_bytes_per_token(shape, config) + 1) / GIB


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
