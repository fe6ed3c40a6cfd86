"""Typed run configuration: one sub-config per package, TOML files plus ``--section.key value``.

Everything is validated before any actor starts, so a typo costs a second, not a cluster
allocation. Unknown keys are refused (``extra="forbid"``) and cross-field rules explain why they
exist, e.g. the batch must be a multiple of the group size because advantages are normalised
per group.

Modules: ``run`` (run, model, data, eval, rollout, episode, selfplay, sandbox), ``learning``
(advantage, learner, async, weights, ray), ``root`` (:class:`Config` and its cross-section
rules), ``files`` (reading TOML and overrides), ``toml_writer``.
"""

from common.config.base import ConfigError, Section
from common.config.files import MOVED_KEYS, apply_overrides, load_config, validate_config
from common.config.learning import (
    AdvantageConfig,
    AsyncConfig,
    KalmanConfig,
    LearnerConfig,
    LoraConfig,
    RayConfig,
    WeightsConfig,
)
from common.config.root import Config
from common.config.run import (
    DataConfig,
    EpisodeConfig,
    EvalConfig,
    ModelConfig,
    RolloutConfig,
    RunConfig,
    SandboxConfig,
    SelfPlayConfig,
)

__all__ = [
    "MOVED_KEYS",
    "AdvantageConfig",
    "AsyncConfig",
    "Config",
    "ConfigError",
    "DataConfig",
    "EpisodeConfig",
    "EvalConfig",
    "KalmanConfig",
    "LearnerConfig",
    "LoraConfig",
    "ModelConfig",
    "RayConfig",
    "RolloutConfig",
    "RunConfig",
    "SandboxConfig",
    "Section",
    "SelfPlayConfig",
    "WeightsConfig",
    "apply_overrides",
    "load_config",
    "validate_config",
]
