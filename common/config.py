"""Typed run configuration: one sub-config per package, TOML files plus ``--section.key value``.

Everything is validated before any actor starts, so a typo costs a second, not a cluster
allocation. Unknown keys are refused (``extra="forbid"``) and cross-field rules explain why they
exist, e.g. the batch must be a multiple of the group size because advantages are normalised
per group.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import tomllib
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from common.rewards.config import RewardConfig


class ConfigError(ValueError):
    """A user mistake in the configuration; the message names the field and the reason."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class RunConfig(_Section):
    name: str = "run"
    output_dir: str = "runs"
    seed: int = 0
    steps: int = Field(100, ge=1)
    checkpoint_every: int = Field(0, ge=0, description="0: only at the end of the run")
    plot: bool = True
    save_rollouts: bool = Field(
        True,
        description="every trained completion, its program, verdicts, rewards and advantage "
        "in <run>/rollouts/ (launch/rollouts.py reads them)",
    )
    rollouts_file_mib: float = Field(
        64, gt=0, description="a rollout file past this size is gzipped and a new one started"
    )
    rollouts_max_mib: float = Field(
        1024, gt=0, description="the oldest rollout files are deleted beyond this much in all"
    )


class ModelConfig(_Section):
    path: str = Field(
        "builtin:tiny",
        description="HF model directory or hub name; 'builtin:tiny' builds a tiny random model",
    )
    dtype: Literal["bfloat16", "float16", "float32"] = "bfloat16"
    max_model_len: int = Field(512, ge=16)


class DataConfig(_Section):
    source: str = Field(
        "synthetic",
        description="'synthetic', a problems file (MBPP .jsonl/.json, HumanEval .jsonl[.gz], "
        "generic .jsonl) or a Hugging Face dataset name[:config]",
    )
    format: Literal["auto", "mbpp", "humaneval", "generic"] = "auto"
    split: str = Field(
        "train", description="MBPP: train, test, validation, prompt; 'all': every row"
    )
    max_problems: int = Field(0, ge=0, description="0: all")
    prompt_template: Literal["auto", "chat", "plain"] = Field(
        "auto", description="auto: the model's chat template if it has one; ignored for synthetic"
    )
    curriculum: Literal["uniform", "failure_focused", "easy_to_hard"] = "uniform"
    curriculum_ema: float = Field(
        0.3, gt=0, le=1, description="weight of the newest group in a problem's pass rate"
    )
    curriculum_ramp_steps: int = Field(
        100, ge=1, description="easy_to_hard: steps until the pool is the whole set"
    )


class EvalConfig(_Section):
    every: int = Field(0, ge=0, description="evaluate every N steps and at the end; 0: never")
    source: str = Field("", description="problems to evaluate on; '': data.source")
    split: str = "test"
    max_problems: int = Field(0, ge=0, description="0: the whole split")
    n: int = Field(1, ge=1, description="samples per problem")
    k: list[int] = Field(default_factory=lambda: [1])

    @model_validator(mode="after")
    def _check_k(self) -> EvalConfig:
        if not self.k or min(self.k) < 1 or max(self.k) > self.n:
            raise ValueError(
                f"k ({self.k}) must be between 1 and n ({self.n}): pass@k needs at least k "
                "samples per problem"
            )
        return self


class RolloutConfig(_Section):
    num_actors: int = Field(1, ge=1)
    batch_size: int = Field(64, ge=2, description="completions per step (prompts x group_size)")
    group_size: int = Field(8, description="G: completions sampled per prompt")
    max_new_tokens: int = Field(64, ge=1)
    min_new_tokens: int = Field(0, ge=0, description="no stop (EOS or stop string) before this")
    ignore_eos: bool = Field(False, description="keep sampling past EOS (fixed-length benchmarks)")
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(1.0, gt=0, le=1)
    stop: list[str] = Field(default_factory=list, description="stop strings (kept in the output)")
    kv_cache_gib: float = Field(1.0, gt=0, description="CPU engines only: KV cache size")
    num_cpus: float = Field(1.0, ge=0)
    num_gpus: float = Field(0.0, ge=0)
    enforce_eager: bool = True
    max_num_batched_tokens: int = Field(
        0,
        ge=0,
        description="tokens one engine step processes (prefill and decode); 0: vLLM's default. "
        "On CPU hosts prompts are never split across steps, so at least model.max_model_len",
    )
    engine_process: Literal["actor", "separate"] = Field(
        "actor",
        description="actor: vLLM's engine core runs inside the rollout actor's process (no "
        "inter-process hop per engine step; on CPU hosts the two processes no longer compete "
        "for cores); separate: vLLM's own engine-core process, which overlaps scheduling with "
        "GPU execution",
    )

    @model_validator(mode="after")
    def _check_group(self) -> RolloutConfig:
        if self.group_size < 2:
            raise ValueError(
                f"group_size ({self.group_size}) must be at least 2: advantages are rewards "
                "normalised within a group, and a group of one has no baseline"
            )
        if self.min_new_tokens > self.max_new_tokens:
            raise ValueError(
                f"min_new_tokens ({self.min_new_tokens}) must not exceed max_new_tokens "
                f"({self.max_new_tokens})"
            )
        if self.batch_size % self.group_size:
            raise ValueError(
                f"batch_size ({self.batch_size}) must be a multiple of group_size "
                f"({self.group_size}): advantages are normalised per group"
            )
        return self

    @property
    def prompts_per_step(self) -> int:
        return self.batch_size // self.group_size


class SandboxConfig(_Section):
    num_workers: int = Field(2, ge=1)
    timeout_s: float = Field(10.0, gt=0, description="wall-clock limit for one completion")
    test_timeout_s: float = Field(5.0, gt=0, description="wall-clock limit for one test")
    memory_mb: int = Field(512, ge=32)
    max_output_bytes: int = Field(64 * 1024, ge=1024)
    cache: bool = True
    allow_unisolated: bool = Field(
        False, description="run without namespaces when the kernel allows none (unsafe)"
    )
    num_cpus: float = Field(0.0, ge=0)
    pin_hot_pages: bool = Field(
        True,
        description="each worker's zygote pins the pages an execution writes (io_uring "
        "buffers, ~1 MiB of RLIMIT_MEMLOCK per worker), so that a fork copies them at once "
        "instead of faulting on each; falls back, and says why, where the kernel refuses",
    )
    zygote_loop: Literal["auto", "python"] = Field(
        "auto",
        description="'auto': each zygote runs its loop in C (sandbox/_zygote.c, built on "
        "first use with the host's C compiler and cached) when it is its PID namespace's "
        "init; 'python': the Python loop, which does the same with more CPU per execution",
    )
    cpu_affinity: Literal["auto", "none"] | list[int] = Field(
        "auto",
        description="'auto': worker i (its zygote and every child) is pinned to the i-th CPU "
        "this process may use counting from the last, round robin; a list of CPU ids: the "
        "same over those CPUs in that order; 'none': the scheduler places them",
    )

    @model_validator(mode="after")
    def _check_cpu_affinity(self) -> SandboxConfig:
        if isinstance(self.cpu_affinity, list) and (
            not self.cpu_affinity or min(self.cpu_affinity) < 0
        ):
            raise ValueError("cpu_affinity must be 'auto', 'none' or a non-empty list of CPU ids")
        return self


class KalmanConfig(_Section):
    """The per-problem running baseline (``advantage.baseline = "kalman"``; see
    ``launch.advantage.kalman``)."""

    process_noise: float = Field(
        0.01, ge=0, description="Q: variance a problem's mean reward drifts by per step"
    )
    reward_variance: float = Field(
        0.25, gt=0, description="R x n: variance of one completion's reward around its mean"
    )
    initial_mean: float = 0.0
    initial_variance: float = Field(1.0, gt=0, description="P0: uncertainty of a new problem")
    std_floor: float = Field(
        0.1, gt=0, description="scale = group_std: the smallest divisor (a uniform group has 0)"
    )


class AdvantageConfig(_Section):
    """From a step's rewards to each sample's advantage (``launch.advantage``)."""

    baseline: Literal["group_mean", "kalman"] = Field(
        "group_mean", description="group_mean: GRPO; kalman: a per-problem running estimate"
    )
    scale: Literal["group_std", "batch_std", "none"] = Field(
        "group_std",
        description="divide the centred rewards by the group's std (GRPO), the batch's, or "
        "nothing (Dr. GRPO); with the Kalman baseline group_std or none",
    )
    eps: float = Field(1e-4, gt=0, description="added to the std (group_mean baseline)")
    reward_scale: float = Field(
        1.0, gt=0, description="DGRO: multiplies advantages, decoupled from beta"
    )
    kalman: KalmanConfig = KalmanConfig()
    dynamic_sampling: bool = Field(
        False, description="drop groups whose rewards are all equal and sample more prompts"
    )
    max_sampling_rounds: int = Field(
        4, ge=1, description="rollout rounds per step, the ordinary one included"
    )
    tie_noise: float = Field(
        0.0,
        ge=0,
        description="heuristic, off at 0: zero-mean Gaussian noise of this std added to the "
        "rewards of groups whose reward std is at most tie_noise_below, so tied groups still "
        "push the policy somewhere (exploration) instead of giving no gradient",
    )
    tie_noise_below: float = Field(
        1e-6, ge=0, description="tie_noise: the group reward std at or below which it applies"
    )
    low_variance_temperature: float = Field(
        0.0,
        ge=0,
        description="heuristic, off at 0, needs dynamic_sampling: a later sampling round first "
        "samples the prompts of the previous round's tied groups again at this (higher) "
        "temperature, then new prompts for the rest; those completions are trained on at the "
        "temperature they were sampled at",
    )

    @model_validator(mode="after")
    def _check_scale(self) -> AdvantageConfig:
        if self.low_variance_temperature and not self.dynamic_sampling:
            raise ValueError(
                "low_variance_temperature needs dynamic_sampling = true: it resamples the groups "
                "that dynamic sampling drops"
            )
        if self.baseline == "kalman" and self.scale == "batch_std":
            raise ValueError(
                "scale = 'batch_std' is not defined for the Kalman baseline: use group_std "
                "(divided by max(group std, kalman.std_floor)) or none"
            )
        return self


class LoraConfig(_Section):
    enabled: bool = False
    rank: int = Field(8, ge=1)
    alpha: float = 16.0
    dropout: float = Field(0.0, ge=0, lt=1)
    target_modules: list[str] = ["q_proj", "k_proj", "v_proj", "o_proj"]
    modules_to_save: list[str] = Field(
        default_factory=list,
        description="modules trained in full beside the adapter (peft modules_to_save; a name "
        "matches every module whose dotted name ends with it: 'model.norm' is the final RMSNorm "
        "alone, 'norm' every norm; a tied 'embed_tokens' stays tied to the LM head); needs "
        "export = 'merged'",
    )
    export: Literal["merged", "adapter"] = Field(
        "merged",
        description="how LoRA updates reach vLLM: merged into the base weights, or as a LoRA "
        "adapter with a new adapter id per weight version",
    )


class LearnerConfig(_Section):
    @model_validator(mode="after")
    def _check_combinations(self) -> LearnerConfig:
        if self.lora.export == "adapter" and not self.lora.enabled:
            raise ValueError(
                "lora.export = 'adapter' needs lora.enabled = true: without LoRA there is no "
                "adapter to send"
            )
        if self.lora.export == "adapter" and self.lora.modules_to_save:
            raise ValueError(
                f"lora.modules_to_save ({self.lora.modules_to_save}) needs lora.export = "
                "'merged': a vLLM LoRA adapter carries only low-rank deltas, so fully trained "
                "modules (a norm, an embedding) would never reach the engines"
            )
        if self.warmup_steps and self.warmup_ratio:
            raise ValueError("give warmup_steps or warmup_ratio, not both")
        if self.min_lr > self.lr:
            raise ValueError(f"min_lr ({self.min_lr}) is above lr ({self.lr})")
        if self.ratio_level == "sequence" and self.aggregation != "seq_mean_token_mean":
            raise ValueError(
                f"ratio_level = 'sequence' (GSPO) needs aggregation = 'seq_mean_token_mean', not "
                f"{self.aggregation!r}: its ratio, clip and loss are one per completion, averaged "
                "over completions; a token-weighted average would count long completions' "
                "sequence terms many times"
            )
        if self.kl_control != "fixed" and self.beta <= 0:
            raise ValueError(
                f"kl_control = {self.kl_control!r} needs beta > 0: beta is where it starts, and "
                "the reference it measures KL against is only built when beta > 0"
            )
        return self

    lr: float = Field(1e-5, gt=0)
    lr_schedule: Literal["constant", "linear", "cosine"] = Field(
        "constant",
        description="after warmup: constant lr, or decay to min_lr at the run's last optimiser "
        "step (linear or cosine); counted in optimiser steps, continued exactly on resume",
    )
    warmup_steps: int = Field(
        0, ge=0, description="optimiser steps of linear warmup from lr/warmup_steps up to lr"
    )
    warmup_ratio: float = Field(
        0.0, ge=0, lt=1, description="warmup as a fraction of the run's optimiser steps"
    )
    min_lr: float = Field(0.0, ge=0, description="where linear and cosine decay end")
    adam_betas: tuple[float, float] = Field(
        (0.9, 0.999), description="AdamW's betas (0.9, 0.95 is common for RL fine-tuning)"
    )
    adam_eps: float = Field(1e-8, gt=0, description="AdamW's eps")
    weight_decay: float = Field(0.0, ge=0)
    max_grad_norm: float = Field(1.0, gt=0)
    beta: float = Field(0.0, ge=0, description="KL-to-reference weight; 0 skips the reference")
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    kl_control: Literal["fixed", "adaptive", "linear"] = Field(
        "fixed",
        description="beta fixed; adaptive (PPO's controller toward kl_target); or linear from "
        "beta to beta_final over the run",
    )
    kl_target: float = Field(
        0.01, gt=0, description="adaptive kl_control: the per-token KL beta steers toward"
    )
    kl_horizon: int = Field(
        10_000, ge=1, description="adaptive kl_control: samples over which beta adapts"
    )
    beta_final: float = Field(0.0, ge=0, description="linear kl_control: beta at the last step")
    clip_eps_low: float = Field(0.2, ge=0)
    clip_eps_high: float = Field(0.2, ge=0)
    ratio_level: Literal["token", "sequence"] = Field(
        "token",
        description="token: a ratio per token (GRPO); sequence: GSPO's one ratio per completion, "
        "the geometric mean of its token ratios, clipped with seq_clip_eps_*",
    )
    seq_clip_eps_low: float = Field(
        3e-4, ge=0, description="GSPO's clip range below 1 (its paper's value)"
    )
    seq_clip_eps_high: float = Field(
        4e-4, ge=0, description="GSPO's clip range above 1 (its paper's value)"
    )
    aggregation: Literal["seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm"] = (
        "seq_mean_token_mean"
    )
    entropy_coef: float = Field(0.0, ge=0)
    max_len: int = Field(0, ge=0, description="Dr. GRPO length normaliser; 0: longest in batch")
    logprob_chunk_tokens: int = Field(1024, ge=1)
    kl_in: Literal["loss", "reward"] = Field(
        "loss", description="KL as a loss term, or -beta*KL per sequence in the reward"
    )
    ppo_epochs: int = Field(1, ge=1, description="mu: optimisation epochs over one rollout batch")
    mini_batches: int = Field(1, ge=1, description="optimiser steps per epoch")
    tis_cap: float = Field(
        2.0, ge=0, description="truncated importance-sampling cap on pi_old/pi_sampler; 0: off"
    )
    reference: Literal["frozen_copy", "precomputed"] = Field(
        "frozen_copy",
        description="full fine-tuning: a frozen copy on device, or the initial weights kept on "
        "CPU and swapped in once per batch",
    )
    master_dtype: Literal["float32", "same"] = Field(
        "float32", description="dtype=bfloat16: fp32 master weights + autocast, or pure bf16"
    )
    micro_batch_tokens: int = Field(8192, ge=16, description="token budget of one micro-batch")
    dtype: Literal["float32", "bfloat16"] = "float32"
    gradient_checkpointing: bool = False
    lora: LoraConfig = LoraConfig()
    num_cpus: float = Field(1.0, ge=0)
    num_gpus: float = Field(0.0, ge=0)


class AsyncConfig(_Section):
    max_staleness: int = Field(
        0,
        ge=0,
        description="0: synchronous, every sample on-policy; K >= 1: rollouts and rewards run "
        "up to K steps ahead of the learner (one-step-off-policy at 1), and samples more than K "
        "weight versions behind the learner are dropped (async/dropped_samples)",
    )
    learner_threads_during_rollout: int = Field(
        0,
        ge=0,
        description="async mode, learner and engines on the same CPU cores: the learner's torch "
        "threads while the next batch is being generated; it returns to learner.num_cpus as "
        "soon as the batch is in. 0: always learner.num_cpus",
    )


class WeightsConfig(_Section):
    transport: Literal["cpu_safetensors"] = "cpu_safetensors"
    bucket_mib: float = Field(
        16,
        gt=0,
        description="bound on one bucket of a weight update: each engine decodes and loads one "
        "bucket at a time, so a push never holds a second copy of the whole model there "
        "(and small buckets load faster: docs/benchmarks.md, weight push)",
    )
    parity_probe: int = Field(
        4,
        ge=0,
        description="sequences the learner and every engine score after each push "
        "(weights/parity_probe_diff: does every engine serve the learner's weights?); 0: off",
    )


class RayConfig(_Section):
    address: str = Field(
        "",
        description="'': RAY_ADDRESS, else the cluster of the last `ray start`, else a local one",
    )
    placement: Literal["none", "pack", "spread", "strict_pack", "strict_spread"] = Field(
        "none",
        description="placement group for the learner and the initial rollout actors: 'pack' "
        "keeps them on as few nodes as possible, 'spread' on as many",
    )
    num_cpus: int = Field(0, ge=0, description="local cluster only; 0: Ray's default")


class Config(_Section):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, populate_by_name=True)

    run: RunConfig = RunConfig()
    model: ModelConfig = ModelConfig()
    data: DataConfig = DataConfig()
    eval: EvalConfig = EvalConfig()
    rollout: RolloutConfig = RolloutConfig()
    sandbox: SandboxConfig = SandboxConfig()
    reward: RewardConfig = RewardConfig()
    advantage: AdvantageConfig = AdvantageConfig()
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

    def to_toml(self) -> str:
        """The resolved configuration, saved beside every run so it can be reproduced."""
        return _dump_toml(self.model_dump(by_alias=True))


def _parse_value(raw: str) -> Any:
    """A command-line value: JSON when it parses (numbers, bools, lists), else a string."""
    lowered = raw.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Apply ``--section.key value`` pairs (already split into a flat list) onto a config dict."""
    if len(overrides) % 2:
        raise ConfigError(f"override {overrides[-1]!r} has no value: use --section.key VALUE")
    for flag, raw in zip(overrides[::2], overrides[1::2], strict=True):
        if not flag.startswith("--") or "." not in flag:
            raise ConfigError(f"override {flag!r} must look like --section.key VALUE")
        *sections, key = flag[2:].split(".")
        node = data
        for section in sections:
            node = node.setdefault(section, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {flag!r}: {section!r} is not a section")
        node[key] = _parse_value(raw)
    return data


#: Keys that moved, by their old place: a config that still uses one is refused with its new
#: place, instead of "unknown key".
MOVED_KEYS = {
    "learner.advantage_scale": "advantage.scale",
    "learner.advantage_eps": "advantage.eps",
    "learner.reward_scale": "advantage.reward_scale",
    "rollout.dynamic_sampling": "advantage.dynamic_sampling",
    "rollout.max_sampling_rounds": "advantage.max_sampling_rounds",
    "reward.baseline.kind": "advantage.baseline",
    "reward.baseline.scale": "advantage.scale",
    "reward.baseline.process_noise": "advantage.kalman.process_noise",
    "reward.baseline.reward_variance": "advantage.kalman.reward_variance",
    "reward.baseline.initial_mean": "advantage.kalman.initial_mean",
    "reward.baseline.initial_variance": "advantage.kalman.initial_variance",
    "reward.baseline.std_floor": "advantage.kalman.std_floor",
    "sandbox.reward": "reward.terms.execution.options.mode",
}


def _moved(data: dict) -> list[str]:
    """One line per moved key that ``data`` still uses."""
    lines = []
    for old, new in MOVED_KEYS.items():
        *sections, key = old.split(".")
        node: Any = data
        for section in sections:
            node = node.get(section) if isinstance(node, dict) else None
        if isinstance(node, dict) and key in node:
            lines.append(f"  {old} moved to {new}")
    return lines


def _format_error(err: ValidationError) -> str:
    lines = []
    for item in err.errors():
        where = ".".join(str(p) for p in item["loc"]) or "config"
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = "unknown key (check the spelling against the config reference in README.md)"
        lines.append(f"  {where}: {message}")
    return "invalid configuration:\n" + "\n".join(lines)


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """Load a TOML file (or the defaults), apply overrides and validate everything."""
    data: dict = {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist")
        try:
            data = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    return validate_config(apply_overrides(data, overrides or []))


def validate_config(data: dict) -> Config:
    """A config dict (file plus overrides) as a validated Config; moved keys name their place."""
    moved = _moved(data)
    if moved:
        raise ConfigError("invalid configuration:\n" + "\n".join(moved))
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_error(exc)) from None


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def _dump_toml(data: dict, prefix: str = "") -> str:
    scalars = [f"{k} = {_toml_value(v)}" for k, v in data.items() if not isinstance(v, dict)]
    out = []
    if scalars:
        out.append((f"[{prefix}]\n" if prefix else "") + "\n".join(scalars) + "\n")
    for key, value in data.items():
        if isinstance(value, dict):
            out.append(_dump_toml(value, f"{prefix}.{key}" if prefix else key))
    return "\n".join(out)
