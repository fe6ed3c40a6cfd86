"""The learner's sections: ``[learner]`` (optimiser, speed and memory, resources) and
``[learner.lora]``. The loss's keys are ``[algorithm.loss]`` (``common/config/algorithm.py``).

``[learner]`` is one table in files and on the command line; its keys are grouped here by what
they decide, one small class each with its own rules, which :class:`LearnerConfig` inherits
and adds the rules that span groups to.
"""

from __future__ import annotations

import importlib.util
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    field_validator,
    model_serializer,
    model_validator,
)

from common.config.base import Section


def _auto_or_bool(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """One error for a value that is neither, instead of one per member of the union."""
    try:
        return handler(value)
    except ValidationError:
        raise ValueError(f'expected "auto", true or false, got {value!r}') from None


#: A switch whose default depends on the device (``"auto"``), or true or false.
AutoBool = Annotated[Literal["auto"] | bool, WrapValidator(_auto_or_bool)]


class LoraConfig(Section):
    enabled: bool = Field(
        False,
        description="train a LoRA adapter (peft); the reference is the base with the adapter off",
    )
    rank: int = Field(8, ge=1, description="LoRA rank")
    alpha: float = Field(16.0, description="LoRA alpha")
    dropout: float = Field(0.0, ge=0, lt=1, description="LoRA dropout")
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
        description="modules that get adapters",
    )
    modules_to_save: list[str] = Field(
        default_factory=list,
        description="modules trained in full beside the adapter (peft modules_to_save; a name "
        "matches every module whose dotted name ends with it: 'model.norm' is the final RMSNorm"
        " alone, 'norm' every norm; a tied 'embed_tokens' stays tied to the LM head); needs "
        "export = 'merged'. The merged export sends their trained copies",
    )
    export: Literal["merged", "adapter"] = Field(
        "merged",
        description="how LoRA updates reach vLLM: merged into the base weights, or as a LoRA "
        "adapter with a new adapter id per weight version (`adapter`: only the adapter travels)",
    )
    base_dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto",
        description="the frozen base weights' dtype: float32 as the master weights, or "
        "bfloat16 with learner.dtype = 'bfloat16' (half their memory, shared among "
        "learner.num_ranks; autocast reads them in bf16 anyway, and the residual "
        "stream then runs in bf16 as in the engine; the adapters and modules_to_save stay "
        "float32). auto: bfloat16 on a CUDA learner with learner.dtype = 'bfloat16', else "
        "float32",
    )


class OptimiserKnobs(Section):
    """How the optimiser steps: AdamW, the learning rate and its schedule, gradient clipping,
    and how many optimiser steps one rollout batch makes (epochs x mini-batches)."""

    lr: float = Field(1e-5, gt=0, description="AdamW learning rate")
    lr_schedule: Literal["constant", "linear", "cosine"] = Field(
        "constant",
        description="after warmup: constant lr, or decay to min_lr at the run's last optimiser "
        "step (linear or cosine); counted in optimiser steps, continued exactly on resume. "
        "Logged as `train/lr`. Use a decay with warmup for long runs or larger learning rates",
    )
    warmup_steps: int = Field(
        0,
        ge=0,
        description="optimiser steps of linear warmup from lr/warmup_steps up to lr; for fresh "
        "optimiser state at a large learning rate",
    )
    warmup_ratio: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="warmup as a fraction of the run's optimiser steps (instead of `warmup_steps`)",
    )
    min_lr: float = Field(0.0, ge=0, description="where linear and cosine decay end")
    adam_betas: tuple[float, float] = Field(
        (0.9, 0.999),
        description="AdamW's betas (0.9, 0.95 is common for RL fine-tuning); `[0.9, 0.95]` reacts "
        "faster to the shifting gradients of RL",
    )
    adam_eps: float = Field(
        1e-8,
        gt=0,
        description="AdamW's eps; raise it (1e-6) if bf16 updates spike on near-zero second "
        "moments",
    )
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay")
    max_grad_norm: float = Field(1.0, gt=0, description="gradient clipping")
    optimizer: Literal["adamw", "adamw_bf16", "adamw_8bit"] = Field(
        "adamw",
        description="AdamW's state: 'adamw' torch's, in the parameters' dtype; 'adamw_bf16' "
        "bf16 parameters, gradients and moments with stochastically rounded updates (needs "
        "dtype = 'bfloat16' and master_dtype = 'same'; 8 B per parameter instead of 16); "
        "'adamw_8bit' moments quantised blockwise to 8 bits (2 B per parameter instead of 8). "
        "Both from torchao: pip install '.[lowmem]' (docs/scaling.md)",
    )
    ppo_epochs: int = Field(
        1,
        ge=1,
        description="mu: optimisation epochs over one rollout batch (ratio against the old policy)",
    )
    mini_batches: int = Field(1, ge=1, description="optimiser steps per epoch")

    @model_validator(mode="after")
    def _check_optimiser(self) -> OptimiserKnobs:
        if self.warmup_steps and self.warmup_ratio:
            raise ValueError("give warmup_steps or warmup_ratio, not both")
        if self.min_lr > self.lr:
            raise ValueError(f"min_lr ({self.min_lr}) is above lr ({self.lr})")
        return self


class SpeedKnobs(Section):
    """How a step is computed: precision, memory and speed (chunked logprobs, shared prompts,
    the reference's place, micro-batches, checkpointing, compilation)."""

    logprob_chunk_tokens: int = Field(
        1024,
        ge=0,
        description="LM head rows per checkpointed chunk; 0: all at once, without recompute. "
        "Completion tokens per chunk of the LM head and log-softmax, each chunk recomputed in "
        "backward: caps the float32 logits in memory; 0 keeps the full-vocabulary float32 "
        "logits of the micro-batch alive for backward",
    )
    share_prompts: AutoBool = Field(
        "auto",
        description="run each distinct prompt of a micro-batch once and let its completions "
        "attend to its keys and values (off under gradient checkpointing and compile, and for "
        "sliding-window attention). auto: on for a CPU learner (faster there: "
        "docs/benchmarks.md, one learner step), off on CUDA, where it measured slower and "
        "larger (docs/scaling.md). The same logprobs and gradients either way",
    )
    reference: Literal["frozen_copy", "precomputed"] = Field(
        "frozen_copy",
        description="full fine-tuning: a frozen copy on device, or the initial weights kept on "
        "CPU and swapped in once per batch",
    )
    reference_dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto",
        description="full fine-tuning: the dtype the reference's weights are kept in (LoRA "
        "has no copy: the base with the adapter off). auto: on CUDA the compute dtype (bf16 "
        "halves the frozen copy and its matmuls read bf16 under autocast anyway), on CPU the "
        "parameters' dtype, as before",
    )
    master_dtype: Literal["float32", "same"] = Field(
        "float32", description="dtype=bfloat16: fp32 master weights + autocast, or pure bf16"
    )
    micro_batch_tokens: int = Field(
        8192,
        ge=16,
        description="token budget of one micro-batch; padded tokens of one micro-batch (gradient "
        "accumulation)",
    )
    memory_gib: float = Field(
        0.0,
        ge=0,
        description="a learner rank's memory target: when set, the micro-batch token budget is "
        "derived from it (the target minus the rank's weights, gradients, AdamW state and "
        "reference, over the activation bytes per token of the model's shape: "
        "common/memory/arithmetic.py) "
        "instead of micro_batch_tokens, so long completions cannot push a step past it; "
        "0: micro_batch_tokens, or fewer on a GPU whose card cannot hold them (a "
        "share of the card planned: common/memory/fit.py's CARD_FILL)",
    )
    dtype: Literal["float32", "bfloat16"] = Field(
        "float32", description="compute dtype (`bfloat16`: autocast, see `master_dtype`)"
    )
    gradient_checkpointing: bool | int | Literal["auto"] = Field(
        False,
        description="recompute activations in backward instead of keeping them, decoder layer "
        "by decoder layer: true every layer, false none, an integer k the first k layers (k "
        "<= the model's layers), 'auto' the fewest layers with which a micro-batch of "
        "micro_batch_tokens fits memory_gib (common/memory/arithmetic.py's arithmetic; all of "
        "them, and "
        "a smaller micro-batch, when even that does not fit); 'auto' without memory_gib "
        "fits the GPU's card, and on CPU checkpoints none, as false does. The count is logged "
        "when the "
        "learner starts. Any checkpointed layer turns share_prompts off",
    )
    compile: AutoBool = Field(
        "auto",
        description="torch.compile each decoder layer of the policy and of a frozen "
        "reference copy, and the LM head's softmax math (one fused read of each chunk's "
        "logits for a plain head in chunks, learner/head_kernels.py; dynamic shapes); the "
        "first steps pay the compilation (docs/benchmarks.md, one learner step). auto: on for "
        "a CUDA learner of one rank without offload_optimizer = 'step', whose first steps then "
        "pay it (the steps after are faster: "
        "docs/scaling.md), unless share_prompts = true asks for the shared path it turns off; "
        "off on CPU (a small gain there, not worth the compilation in tests and short runs)",
    )
    offload_optimizer: Literal["never", "while_generating", "step"] = Field(
        "never",
        description="'while_generating' (needs rollout.colocate): move the AdamW state (its "
        "moments) to pinned host memory after each step and back before the next, so the "
        "engine sharing the GPU has that memory while it generates (colocate/offload_s, "
        "colocate/reload_s). 'step' (no engine needed): keep the fp32 master weights, "
        "gradients and AdamW state in host memory for the whole run and step the optimiser "
        "there (FSDP2's CPU offload, also for one rank): the device holds the units being "
        "computed and their gradients until copied back, activations and the reference, so a "
        "full fine-tune fits a much smaller card (docs/gpus.md), at the price of host-device "
        "copies each micro-batch and a CPU optimiser step; torch's AdamW only, compile off. "
        "On CPU learners the state already lives in host memory: nothing moves",
    )

    peak_tflops: float = Field(
        0.0,
        ge=0,
        description="the device's matmul peak per rank that train/mfu divides by; 0: measured "
        "once per process, just before the learner's first step (a few large matrix products "
        "in the compute dtype; not at start, where a colocated engine may still be loading "
        "on the same device)",
    )

    @field_validator("gradient_checkpointing", mode="before")
    @classmethod
    def _check_checkpointing(cls, value: Any) -> Any:
        # before pydantic's union, whose three failures would read as three errors
        if isinstance(value, bool) or value == "auto":
            return value
        if isinstance(value, int) and value >= 0:
            return value
        raise ValueError(
            f"{value!r}: give true, false, 'auto' or how many decoder layers to checkpoint "
            "(an integer >= 0)"
        )

    def bf16_lora_base(self, device_type: str) -> bool:
        """Whether a learner on ``device_type`` keeps its frozen LoRA base in bf16
        (``lora.base_dtype``, ``auto`` resolved): how it builds it (learner/policy.py) and how
        the memory arithmetic counts it (common/memory/arithmetic.py)."""
        if not self.lora.enabled:
            return False
        if self.lora.base_dtype != "auto":
            return self.lora.base_dtype == "bfloat16"
        return device_type == "cuda" and self.dtype == "bfloat16"

    def reference_dtype_on(self, device_type: str) -> Literal["float32", "bfloat16"]:
        """``reference_dtype`` with ``auto`` resolved for a learner on ``device_type``
        (``"cuda"`` or ``"cpu"``): see the field's description."""
        if self.reference_dtype != "auto":
            return self.reference_dtype
        if device_type == "cuda":
            return self.dtype
        return "bfloat16" if self.dtype == "bfloat16" and self.master_dtype == "same" else "float32"


class ResourceKnobs(Section):
    """What the learner asks Ray for, how many ranks shard it, and how often it may restart."""

    num_cpus: float = Field(1.0, ge=0, description="per learner rank; also its torch threads")
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
        "(FSDP2) and split each step's samples; they step together and compute the same update "
        "as one rank. Each gets num_cpus/num_gpus in the run's placement group (gloo on CPU, "
        'NCCL on GPU). `lora.export = "adapter"`, `reference = "precomputed"` and `compile` are'
        " not available with several ranks yet; a run resumes with the rank count it was saved "
        "with",
    )

    @model_validator(mode="after")
    def _check_resources(self) -> ResourceKnobs:
        if self.num_ranks > 1 and not (self.num_cpus or self.num_gpus):
            raise ValueError(
                "learner.num_ranks > 1 needs num_cpus or num_gpus per rank: each rank gets a "
                "bundle of the run's placement group, and a bundle cannot be empty"
            )
        return self


#: ``[learner]``'s keys in the order saved configs list them (the groups above interleave there).
_SAVED_ORDER = (
    "lr",
    "lr_schedule",
    "warmup_steps",
    "warmup_ratio",
    "min_lr",
    "adam_betas",
    "adam_eps",
    "weight_decay",
    "max_grad_norm",
    "logprob_chunk_tokens",
    "share_prompts",
    "ppo_epochs",
    "mini_batches",
    "reference",
    "master_dtype",
    "micro_batch_tokens",
    "memory_gib",
    "dtype",
    "gradient_checkpointing",
    "compile",
    "lora",
    "num_cpus",
    "num_gpus",
    "max_restarts",
    "num_ranks",
    "offload_optimizer",
    "reference_dtype",
    "optimizer",
    "peak_tflops",
)


class LearnerConfig(OptimiserKnobs, SpeedKnobs, ResourceKnobs):
    """``[learner]``: every group's keys in one table, plus LoRA and the rules across groups."""

    lora: LoraConfig = LoraConfig()

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
        if self.num_ranks > 1 and self.compile is True:  # "auto" resolves to off there
            raise ValueError(
                "learner.compile = true is not available with learner.num_ranks > 1 yet: "
                "compiled layers inside FSDP2's units have not been tested (compile = 'auto', "
                "the default, is off there)"
            )
        if self.num_ranks > 1 and self.lora.export == "adapter":
            raise ValueError(
                "learner.num_ranks > 1 sends merged weights: lora.export = 'adapter' is not "
                "implemented for a sharded learner yet"
            )
        self._check_host_step()  # first: it refuses the low-precision optimisers outright
        self._check_optimizer()
        self._check_lora_base()
        if self.num_ranks > 1 and self.reference == "precomputed" and not self.lora.enabled:
            raise ValueError(
                "reference = 'precomputed' is not implemented for learner.num_ranks > 1: use "
                "'frozen_copy', which is sharded like the policy"
            )
        return self

    def _check_lora_base(self) -> None:
        """``lora.base_dtype = 'bfloat16'``: for bf16 compute (under FSDP2 a unit holds the
        bf16 base and the float32 adapters: only what trains must share a dtype)."""
        if self.lora.base_dtype != "bfloat16":  # "auto" resolves to float32 where not
            return
        if not self.lora.enabled or self.dtype != "bfloat16":
            raise ValueError(
                "lora.base_dtype = 'bfloat16' needs lora.enabled = true and learner.dtype = "
                "'bfloat16'"
            )

    def _check_host_step(self) -> None:
        """``offload_optimizer = 'step'``: what runs inside FSDP2's CPU offload, as tested."""
        if self.offload_optimizer != "step":
            return
        step = "learner.offload_optimizer = 'step'"
        if self.optimizer != "adamw":
            raise ValueError(
                f"{step} steps torch's AdamW on the host: learner.optimizer = "
                f"{self.optimizer!r} (torchao's compiled low-precision step) is not supported "
                "there; use 'adamw' (host memory holds its full moments)"
            )
        if self.compile is True:  # "auto" resolves to off there
            raise ValueError(
                f"learner.compile = true is not available with {step}: compiled layers inside "
                "FSDP2's units have not been tested (compile = 'auto', the default, is off there)"
            )
        if self.lora.enabled and self.lora.export == "adapter":
            raise ValueError(
                f"{step} sends merged weights: lora.export = 'adapter' is not implemented for a "
                "policy inside FSDP2 yet"
            )
        if self.reference == "precomputed" and not self.lora.enabled:
            raise ValueError(
                f"reference = 'precomputed' swaps the initial weights into the policy's own "
                f"parameters, which {step} keeps on the host inside FSDP2: use 'frozen_copy' "
                "(on the device, in learner.reference_dtype)"
            )

    def _check_optimizer(self) -> None:
        """The low-precision optimisers' needs: their library, and bf16 parameters for
        ``adamw_bf16`` (its moments take the parameters' dtype)."""
        if self.optimizer == "adamw":
            return
        if importlib.util.find_spec("torchao") is None:
            raise ValueError(
                f"learner.optimizer = {self.optimizer!r} needs torchao: pip install '.[lowmem]'"
            )
        if self.optimizer == "adamw_bf16" and (
            self.dtype != "bfloat16" or self.master_dtype != "same"
        ):
            raise ValueError(
                "learner.optimizer = 'adamw_bf16' keeps parameters, gradients and moments in "
                "bf16 (updates rounded stochastically): it needs learner.dtype = 'bfloat16' and "
                "learner.master_dtype = 'same'"
            )

    def compile_on(self, device_type: str) -> bool:
        """``compile`` with ``auto`` resolved for a learner on ``device_type`` (``"cuda"`` or
        ``"cpu"``): on for one CUDA rank outside FSDP2 (no ``offload_optimizer = 'step'``),
        unless ``share_prompts = true`` asks for the path compiled layers cannot run; see the
        field's description."""
        if self.compile != "auto":
            return self.compile
        one_rank = self.num_ranks == 1 and self.offload_optimizer != "step"  # no FSDP2 units
        return device_type == "cuda" and one_rank and self.share_prompts is not True

    def share_prompts_on(self, device_type: str) -> bool:
        """``share_prompts`` with ``auto`` resolved for a learner on ``device_type``, and off
        where the shared forward cannot run: with checkpointed layers (a layer's recompute
        would fill the KV cache the shared forward runs on a second time) and with compiled
        layers (one graph per layer and pass once they read the cache). The model's own limit
        (sliding-window attention) is the learner's to add: ``can_share_prompts``."""
        wanted = device_type == "cpu" if self.share_prompts == "auto" else self.share_prompts
        # "auto" checkpointing may checkpoint no layer: the learner, which resolves it, turns
        # sharing off when it does (Learner.share_prompts)
        return wanted and not self.checkpoints_layers and not self.compile_on(device_type)

    @property
    def checkpoints_layers(self) -> bool:
        """Whether ``gradient_checkpointing`` checkpoints a layer whatever the model: true or a
        count above 0. ``"auto"`` is decided from the model's shape when the learner starts
        (``common.memory.fit.checkpointed_layers``), so it does not count here."""
        return self.gradient_checkpointing not in (False, 0, "auto")

    @model_serializer(mode="wrap")
    def _in_saved_order(self, handler: Any) -> dict[str, Any]:
        data = handler(self)
        ordered = {key: data[key] for key in _SAVED_ORDER if key in data}
        return ordered | {key: value for key, value in data.items() if key not in ordered}
