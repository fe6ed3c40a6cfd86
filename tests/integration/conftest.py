"""Fixtures that several integration modules share: a run is minutes of engine start and
steps, so one that many tests compare against is trained once per session."""

from __future__ import annotations

import pytest

from common.config import Config
from tests.integration.helpers import STRAIGHT_STEPS, short_config


@pytest.fixture(scope="session")
def straight_run(tmp_path_factory, tiny_model_path) -> Config:
    """The shrunk demo (:func:`short_config`), synchronous, ``STRAIGHT_STEPS`` steps straight
    through: the prompts (and the KL) that a stopped, resumed, restarted or asynchronous run
    must reproduce (test_async, test_resume). Its first k steps are a k-step run's: the prompt
    draws and sampling seeds depend on (run.seed, step) only, and the demo's learning rate and
    KL coefficient are constant (no schedule over run.steps), so a shorter run compares against
    a prefix of it."""
    from launch.train import train

    config = short_config(
        tmp_path_factory.mktemp("straight"), "straight", tiny_model_path, STRAIGHT_STEPS
    )
    train(config)
    return config


@pytest.fixture(scope="session")
def long_context_model(tmp_path_factory):
    """The tiny model with room for a contest or LeetCode statement (thousands of its tokens)."""
    from launch.data.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny8k"), max_position_embeddings=8192)
