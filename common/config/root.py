"""The whole run configuration: one table per section, and the rules that span sections."""

from __future__ import annotations

from pathlib import Path

from pydantic import ConfigDict, Field, model_validator

from common.config.algorithm import AlgorithmConfig, RewardConfig
from common.config.base import Section
from common.config.infrastructure import AsyncConfig, RayConfig, RunConfig, WeightsConfig
from common.config.learner import LearnerConfig
from common.config.rollout import (
    DataConfig,
    EpisodeConfig,
    EvalConfig,
    ModelConfig,
    RolloutConfig,
    SelfPlayConfig,
)
from common.config.sandbox import SandboxConfig
from common.config.toml_writer import dump_toml


class Config(Section):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, populate_by_name=True)

    run: RunConfig = RunConfig()
    model: ModelConfig = ModelConfig()
    data: DataConfig = DataConfig()
    eval: EvalConfig = EvalConfig()
    rollout: RolloutConfig = RolloutConfig()
    episode: EpisodeConfig = EpisodeConfig()
    selfplay: SelfPlayConfig = SelfPlayConfig()
    sandbox: SandboxConfig = SandboxConfig()
    reward: RewardConfig = RewardConfig()
    algorithm: AlgorithmConfig = AlgorithmConfig()
    learner: LearnerConfig = LearnerConfig()
    # ``async`` is a Python keyword: the attribute is ``async_``, the key in files and on the
    # command line is ``async`` (``--async.max_staleness 1``).
    async_: AsyncConfig = Field(AsyncConfig(), alias="async")
    weights: WeightsConfig = WeightsConfig()
    ray: RayConfig = RayConfig()

    @property
    def run_dir(self) -> Path:
        return Path(self.run.output_dir) / self.run.name

    @property
    def bucket_bytes(self) -> int:
        """``weights.bucket_mib`` in bytes."""
        return int(self.weights.bucket_mib * (1 << 20))

    @property
    def served_lora_rank(self) -> int:
        """Rank of the LoRA adapters the engines must serve: the learner's rank when updates
        travel as adapters (``lora.export = "adapter"``), else 0 (merged weights, no adapters)."""
        lora = self.learner.lora
        return lora.rank if lora.enabled and lora.export == "adapter" else 0

    @model_validator(mode="after")
    def _check_selfplay(self) -> Config:
        selfplay = self.selfplay
        if not selfplay.saboteur:
            return self
        if selfplay.saboteur_prompts >= self.rollout.prompts_per_step:
            raise ValueError(
                f"selfplay.saboteur_prompts ({selfplay.saboteur_prompts}) must be fewer than "
                f"the step's prompts ({self.rollout.prompts_per_step}): the rest are solved "
                "as usual"
            )
        if self.algorithm.advantage.baseline == "kalman":
            raise ValueError(
                "selfplay.saboteur needs algorithm.advantage.baseline = 'group_mean': the Kalman "
                "baseline tracks problems, and saboteur and fixer groups pose other prompts"
            )
        if self.episode.max_turns > 1:
            raise ValueError("selfplay.saboteur and episode.max_turns > 1 do not combine yet")
        return self

    @model_validator(mode="after")
    def _check_context(self) -> Config:
        new, context = self.rollout.max_new_tokens, self.model.max_model_len
        if new >= context:
            raise ValueError(
                f"rollout.max_new_tokens ({new}) leaves no room for a prompt in "
                f"model.max_model_len ({context}), which counts prompt + completion tokens"
            )
        return self

    @model_validator(mode="after")
    def _choose_transport(self) -> Config:
        """weights.transport left unset: 'ipc' where it works (engines and learner ranks on
        the same GPUs), the object store otherwise."""
        if "transport" not in self.weights.model_fields_set and ipc_refusal(self) is None:
            self.weights.transport = "ipc"
        return self

    @model_validator(mode="after")
    def _check_ipc(self) -> Config:
        if self.weights.transport == "ipc" and (reason := ipc_refusal(self)) is not None:
            raise ValueError(reason)
        return self

    @model_validator(mode="after")
    def _check_transport(self) -> Config:
        if self.weights.transport != "collective":
            return self
        if self.async_.max_staleness:
            raise ValueError(
                "weights.transport = 'collective' needs async.max_staleness = 0 for now: a "
                "push is paired with the learner's broadcast, and an async run pushes while "
                "the learner trains the next step"
            )
        if self.rollout.num_gpus > 0 and self.learner.num_gpus <= 0:
            raise ValueError(
                "weights.transport = 'collective' with GPU engines (rollout.num_gpus > 0) "
                "broadcasts over NCCL, which needs the learner on a GPU too (learner.num_gpus)"
            )
        lora = self.learner.lora
        if lora.enabled and lora.export == "adapter":
            raise ValueError(
                "weights.transport = 'collective' sends merged weights: with lora.export = "
                "'adapter' the adapter travels through the file system instead"
            )
        return self

    @model_validator(mode="after")
    def _check_learner_threads(self) -> Config:
        narrowed = self.async_.learner_threads_during_rollout
        if narrowed and not self.async_.max_staleness:
            raise ValueError(
                "async.learner_threads_during_rollout needs async.max_staleness >= 1: in "
                "synchronous mode the learner never trains while a batch is generated"
            )
        if narrowed and narrowed >= int(self.learner.num_cpus):
            raise ValueError(
                f"async.learner_threads_during_rollout ({narrowed}) must be fewer than "
                f"learner.num_cpus ({self.learner.num_cpus:g}), the threads it returns to"
            )
        return self

    @model_validator(mode="after")
    def _check_colocation(self) -> Config:
        rollout, learner = self.rollout, self.learner
        if not rollout.colocate:
            # "step" keeps the state on the host for the learner's own sake: no engine needed
            if learner.offload_optimizer == "while_generating":
                raise ValueError(
                    "learner.offload_optimizer = 'while_generating' needs rollout.colocate = "
                    "true: only an engine on the learner's own GPU uses the memory it frees "
                    "('step' keeps the state on the host without one)"
                )
            return self
        if self.async_.max_staleness:
            raise ValueError(
                "rollout.colocate needs async.max_staleness = 0: the engine sleeps while the "
                "learner steps, and an async run generates the next batch during the step"
            )
        if rollout.num_actors != learner.num_ranks:
            raise ValueError(
                f"rollout.colocate pairs one engine with each learner rank: rollout.num_actors "
                f"({rollout.num_actors}) must equal learner.num_ranks ({learner.num_ranks})"
            )
        gpus = (learner.num_gpus, rollout.num_gpus)
        if any(gpus) and not all(gpus):
            raise ValueError(
                f"rollout.colocate shares each GPU between a learner rank and an engine: give "
                f"learner.num_gpus ({gpus[0]:g}) and rollout.num_gpus ({gpus[1]:g}) both a "
                "fraction of it, or both 0 on CPU hosts"
            )
        if sum(gpus) > 1:
            raise ValueError(
                f"rollout.colocate puts a learner rank and an engine on one GPU: "
                f"learner.num_gpus ({gpus[0]:g}) + rollout.num_gpus ({gpus[1]:g}) must be at "
                "most 1"
            )
        if not (any(gpus) or learner.num_cpus + rollout.num_cpus):
            raise ValueError(
                "rollout.colocate needs learner.num_cpus or rollout.num_cpus: each engine and "
                "learner rank share a placement-group bundle, and a bundle cannot be empty"
            )
        if rollout.sleep_level == 2 and self.served_lora_rank:
            raise ValueError(
                "rollout.sleep_level = 2 discards the engine's weights while it sleeps, and "
                "lora.export = 'adapter' pushes only the adapter: use sleep_level = 1"
            )
        return self

    @property
    def requested_cpus(self) -> float:
        """CPUs the run's actors ask Ray for: learner ranks, rollout actors, sandbox pool and
        learned-scorer terms."""
        learner, rollout = self.learner, self.rollout
        scorers = sum(term.num_cpus for term in self.reward.scorer_terms().values())
        return (
            learner.num_cpus * learner.num_ranks
            + rollout.num_cpus * rollout.num_actors
            + self.sandbox.num_cpus
            + scorers
        )

    def to_toml(self) -> str:
        """The resolved configuration, saved beside every run so it can be reproduced."""
        return dump_toml(self.model_dump(by_alias=True))


def ipc_refusal(config: Config) -> str | None:
    """Why ``weights.transport = 'ipc'`` cannot carry this run's weights, in one line; None
    when it can. A CUDA IPC handle is opened only by a process on the GPU that holds the
    memory, so every engine must share its GPU with the learner rank whose copy it reads."""
    rollout, learner = config.rollout, config.learner
    same_gpu = "weights.transport = 'ipc' needs the engine and the learner on the same GPU: "
    if rollout.num_gpus <= 0 or learner.num_gpus <= 0:
        return same_gpu + (
            f"rollout.num_gpus is {rollout.num_gpus:g} and learner.num_gpus is "
            f"{learner.num_gpus:g} (CUDA IPC handles exist only for GPU memory); on CPU use "
            "'cpu_safetensors' or 'collective'"
        )
    if not rollout.colocate:
        return same_gpu + (
            "rollout.colocate is false, so they run on different GPUs or nodes, where the "
            "handles cannot be opened; set rollout.colocate = true, or use 'collective' (NCCL)"
        )
    if rollout.num_actors != learner.num_ranks or rollout.tensor_parallel_size != 1:
        return same_gpu + (
            f"each engine reads the copy of the learner rank on its GPU, so it needs one "
            f"single-GPU engine per learner rank: rollout.num_actors is {rollout.num_actors}, "
            f"rollout.tensor_parallel_size {rollout.tensor_parallel_size}, learner.num_ranks "
            f"{learner.num_ranks}"
        )
    return _ipc_mode_refusal(config)


def _ipc_mode_refusal(config: Config) -> str | None:
    """The run modes ``weights.transport = 'ipc'`` does not carry (see :func:`ipc_refusal`)."""
    if config.async_.max_staleness:
        return (
            "weights.transport = 'ipc' needs async.max_staleness = 0: the learner keeps an "
            "update's GPU copy only until its next export, which an async run makes before "
            "every engine loaded the last one"
        )
    if config.rollout.engine_process != "actor":
        return (
            "weights.transport = 'ipc' needs rollout.engine_process = 'actor': vLLM's separate "
            "engine process takes CUDA IPC handles only pickled "
            "(VLLM_ALLOW_INSECURE_SERIALIZATION), which this project does not allow"
        )
    lora = config.learner.lora
    if lora.enabled and lora.export == "adapter":
        return (
            "weights.transport = 'ipc' sends merged weights: with lora.export = 'adapter' the "
            "adapter travels through the file system instead"
        )
    return None
