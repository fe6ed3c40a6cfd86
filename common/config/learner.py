"""Sections for how samples become weights: advantage, learner (with LoRA), async, weight
transport and the Ray cluster the actors run on."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from common.config.base import Section


class KalmanConfig(Section):
    """The per-problem running baseline (``advantage.baseline = "kalman"``; see
    ``algorithm.advantage.kalman``)."""

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


class AdvantageConfig(Section):
    """From a step's rewards to each sample's advantage (``algorithm.advantage``)."""

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


class LoraConfig(Section):
    enabled: bool = False
    rank: int = Field(8, ge=1)
    alpha: float = 16.0
    dropout: float = Field(0.0, ge=0, lt=1)
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"]
    )
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


class LearnerConfig(Section):
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
        if self.num_ranks > 1 and not (self.num_cpus or self.num_gpus):
            raise ValueError(
                "learner.num_ranks > 1 needs num_cpus or num_gpus per rank: each rank gets a "
                "bundle of the run's placement group, and a bundle cannot be empty"
            )
        if self.num_ranks > 1 and self.compile:
            raise ValueError(
                "learner.compile is not available with learner.num_ranks > 1 yet: compiled "
                "layers inside FSDP2's units have not been tested"
            )
        if self.num_ranks > 1 and self.lora.export == "adapter":
            raise ValueError(
                "learner.num_ranks > 1 sends merged weights: lora.export = 'adapter' is not "
                "implemented for a sharded learner yet"
            )
        if self.num_ranks > 1 and self.reference == "precomputed" and not self.lora.enabled:
            raise ValueError(
                "reference = 'precomputed' is not implemented for learner.num_ranks > 1: use "
                "'frozen_copy', which is sharded like the policy"
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
    logprob_chunk_tokens: int = Field(
        1024,
        ge=0,
        description="LM head rows per checkpointed chunk; 0: all at once, without recompute",
    )
    share_prompts: bool = Field(
        True,
        description="run each distinct prompt of a micro-batch once and let its completions "
        "attend to its keys and values (off under gradient checkpointing and compile, and for "
        "sliding-window attention)",
    )
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
    compile: bool = Field(
        False,
        description="torch.compile each decoder layer of the policy (dynamic shapes); the "
        "first steps pay the compilation (docs/benchmarks.md, one learner step)",
    )
    lora: LoraConfig = LoraConfig()
    num_cpus: float = Field(1.0, ge=0, description="per learner rank")
    num_gpus: float = Field(0.0, ge=0, description="per learner rank")
    max_restarts: int = Field(
        3,
        ge=0,
        description="a learner rank that dies is restarted, with the whole learner, from the "
        "run's last checkpoint inside the same job (the steps after it are redone), at most "
        "this many times (faults/learner_restarts); without a checkpoint the run stops with "
        "the command that resumes it",
    )
    num_ranks: int = Field(
        1,
        ge=1,
        description="learner processes that shard the policy, gradients and optimiser state "
        "(FSDP2) and split each step's samples; they step together and compute the same "
        "update as one rank. Each gets num_cpus/num_gpus in the run's placement group",
    )


class AsyncConfig(Section):
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


class WeightsConfig(Section):
    transport: Literal["cpu_safetensors", "collective"] = Field(
        "cpu_safetensors",
        description="how weights reach the engines: bounded safetensors buckets through Ray's "
        "object store (any host, across nodes), or 'collective': learner rank 0 broadcasts to "
        "every engine worker in one process group through vLLM's weight-transfer API (NCCL on "
        "GPU, gloo on CPU)",
    )
    bucket_mib: float = Field(
        16,
        gt=0,
        description="bound on one bucket of a weight update: each engine decodes and loads one "
        "bucket at a time, so a push never holds a second copy of the whole model there "
        "(and small buckets load faster: docs/benchmarks.md, weight push)",
    )
    push_timeout_s: float = Field(
        300.0,
        gt=0,
        description="weights.transport = 'collective': the longest a weight push may take: an "
        "engine whose load is not done by then is killed and restarted by Ray; a learner whose "
        "broadcast is not done (a hung NCCL group) is restarted from the last checkpoint, as "
        "after a rank's death",
    )
    parity_probe: int = Field(
        4,
        ge=0,
        description="sequences the learner and every engine score after each push "
        "(weights/parity_probe_diff: does every engine serve the learner's weights?); 0: off",
    )


class RayConfig(Section):
    address: str = Field(
        "",
        description="'': RAY_ADDRESS, else the cluster of the last `ray start`, else a local one",
    )
    placement: Literal["none", "pack", "spread", "strict_pack", "strict_spread"] = Field(
        "none",
        description="placement group for the learner and the initial rollout actors: 'pack' "
        "keeps them on as few nodes as possible, 'spread' on as many",
    )
    num_cpus: int = Field(
        0,
        ge=0,
        description="local cluster only; 0: the machine's CPUs, or what the run's actors ask for "
        "when that is more",
    )
    group_interface: str = Field(
        "",
        description="network interface (e.g. 'eth0', the same name on every node) where the "
        "project's own process groups meet and talk: the learner ranks' and the collective "
        "transport's store listens on its address, and gloo and NCCL use it "
        "(GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME); '': loopback while the Ray cluster has one "
        "node, else the node's address as Ray knows it (gloo and NCCL then pick their own). "
        "Their traffic is unauthenticated plaintext: name a private interface",
    )

    @field_validator("group_interface")
    @classmethod
    def _check_interface(cls, name: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_.-]{0,15}", name):
            raise ValueError(
                f"{name!r} is not a network interface name (Linux names have at most 15 "
                "letters, digits, '_', '.' or '-'); see `ip -brief address`"
            )
        return name
