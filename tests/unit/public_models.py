"""The public models' shapes from their config.json (``model_configs/``): what the memory tests
of ``common/``, ``launch/`` and ``learner/`` count with."""

from __future__ import annotations

import json
from pathlib import Path

from common.memory.arithmetic import ModelShape

CONFIGS = Path(__file__).parent / "model_configs"


def shape(name: str) -> ModelShape:
    """A public model's shape from its config.json (``tests/unit/model_configs/``)."""
    return ModelShape.from_config(json.loads((CONFIGS / f"{name}.json").read_text()))
