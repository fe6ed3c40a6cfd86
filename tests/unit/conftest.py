"""Fixtures the unit tests of several packages share."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def tied_model(tmp_path_factory) -> str:
    """The learner tests' tiny 2-layer Qwen2 with tied embeddings (bf16 on disk, float32 in the
    learner), built once per test module (``tests/unit/learner/helpers.py``)."""
    from tests.unit.learner.helpers import save_tiny_qwen2

    return save_tiny_qwen2(tmp_path_factory.mktemp("tied"), tie_word_embeddings=True)
