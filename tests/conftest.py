"""Shared fixtures: the tiny offline model is built once per test session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory) -> str:
    """A random tiny Qwen2 (tied embeddings, like Qwen2.5) with its locally trained tokenizer."""
    from launch.data.tiny_model import build_tiny_model

    return str(build_tiny_model(tmp_path_factory.mktemp("models") / "tiny"))


def pytest_collection_modifyitems(config, items):
    """Tests that start their own Ray head run last: ``ray stop`` ends every cluster."""
    items.sort(key=lambda item: item.get_closest_marker("cluster") is not None)
