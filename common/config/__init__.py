"""Typed run configuration: one sub-config per package, TOML files plus ``--section.key value``.

Everything is validated before any actor starts, so a typo costs a second, not a cluster
allocation. Unknown keys are refused (``extra="forbid"``) and cross-field rules explain why they
exist, e.g. the batch must be a multiple of the group size because advantages are normalised
per group.

Modules, by role: ``learner`` (learner, lora), ``algorithm`` (``[algorithm]``: advantage and
loss; reward), ``rollout`` (model, data, eval, rollout, episode, selfplay), ``sandbox``,
``infrastructure`` (run, async, weights, ray); ``root`` (:class:`Config` and its cross-section
rules), ``files`` (reading TOML and overrides), ``toml_writer``, ``user_terms`` (importing
user-defined reward terms).
"""

from common.config.algorithm import (
    AdvantageConfig,
    AlgorithmConfig,
    ExecutionOptions,
    KalmanConfig,
    LengthOptions,
    LossConfig,
    RewardConfig,
    RewardTermConfig,
    ScorerOptions,
)
from common.config.base import ConfigError, Section
from common.config.files import apply_overrides, load_config, validate_config
from common.config.infrastructure import AsyncConfig, RayConfig, RunConfig, WeightsConfig
from common.config.learner import (
    LearnerConfig,
    LoraConfig,
    OptimiserKnobs,
    ResourceKnobs,
    SpeedKnobs,
)
from common.config.rollout import (
    DataConfig,
    EpisodeConfig,
    EvalConfig,
    ModelConfig,
    RolloutConfig,
    SelfPlayConfig,
)
from common.config.root import Config
from common.config.sandbox import SandboxConfig

__all__ = [
    "AdvantageConfig",
    "AlgorithmConfig",
    "AsyncConfig",
    "Config",
    "ConfigError",
    "DataConfig",
    "EpisodeConfig",
    "EvalConfig",
    "ExecutionOptions",
    "KalmanConfig",
    "LearnerConfig",
    "LengthOptions",
    "LoraConfig",
    "LossConfig",
    "ModelConfig",
    "OptimiserKnobs",
    "RayConfig",
    "ResourceKnobs",
    "RewardConfig",
    "RewardTermConfig",
    "RolloutConfig",
    "RunConfig",
    "SandboxConfig",
    "ScorerOptions",
    "Section",
    "SelfPlayConfig",
    "SpeedKnobs",
    "WeightsConfig",
    "apply_overrides",
    "load_config",
    "validate_config",
]
