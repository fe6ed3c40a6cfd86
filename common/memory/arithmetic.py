"""GPU memory of a run, by arithmetic on the model's shape: the learner's state and activations,
and the vLLM engine's weights and KV cache.

Pure arithmetic (no torch): the memory plan (``common/memory/plan.py``) runs it before
anything starts, and the learner derives its micro-batch token budget with it
(``common/memory/fit.py``). Counts follow what the code keeps today, read from the modules
named at each function; every constant below says where it comes from. Two factors are fitted
to learner peaks measured on an H200; docs/scaling.md compares the rest with them.

Activations follow Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
Transformer Models", section 4.1): count, per token and decoder layer, the bytes of every
tensor autograd saves for backward. Their 34h assumes a GPT block (LayerNorm, GeLU MLP of 4h,
dropout); the count here is redone for a Qwen2/Llama block as HF transformers runs it (RMSNorm,
SwiGLU MLP, grouped-query attention, no dropout) with a fused SDPA kernel (flash or memory-
efficient: no (s x s) score matrix is kept; with a padding mask HF repeats K and V to every head
before the kernel, so they are counted at full width) and this learner's precision (fp32 master
weights under bf16 autocast keep the residual stream in fp32, and autocast casts a linear's
input once per linear).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from common.config import LearnerConfig

GIB = 1 << 30
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}

#: A CUDA context with cuBLAS loaded, per process on a card (the learner's and the engine's
#: each): what ``nvidia-smi`` shows for an idle torch process on recent cards is 0.3-0.6 GiB.
#: An estimate, not measured here; it is outside torch's ``max_memory_allocated``.
CUDA_CONTEXT_GIB = 0.5
#: float32 (rows, vocab) tensors alive at the peak of one LM-head chunk's backward on the module
#: path (learner/logprobs.py, for sharded learners and heads that are not a plain Linear): the
#: log-softmax output and its exp plus three gradients of that size.
LOGIT_TENSORS_AT_PEAK = 5
#: The same for learner/lm_head.py's autograd function (one-rank learners, a plain head): one
#: (chunk, vocab) float32 buffer plus blocks a fraction of it.
HEAD_FUNCTION_LOGIT_TENSORS = 2
#: torch's foreach AdamW (the default on CUDA) holds one parameter-sized temporary (the square
#: root of the second moment) while it steps: counted from torch/optim/adamw.py.
ADAMW_TEMPORARIES = 1
#: Tied embeddings: the input embedding's and the LM head's float32 (vocab, hidden) gradients
#: are summed into one; two more of them are alive while the sum is made (measured on CPU).
TIED_GRADIENT_EXTRA_COPIES = 2
#: ``learner.share_prompts``, where in effect, keeps each prompt's keys and values gathered out
#: to its rows for the completion pass: +16% of the activations (fitted, docs/scaling.md).
SHARED_PROMPTS_FACTOR = 1.16
#: A compiled CUDA step saves fewer activations than the eager count below: inductor fuses the
#: element-wise work (RMSNorm, SiLU x up, the casts) and recomputes it in backward. The largest
#: fraction measured on an H200 (docs/scaling.md), so a plan over-counts rather than
#: under-counts; not applied on CPU, where it is not measured.
COMPILED_ACTIVATION_FACTOR = 0.65
#: Decoder layers whose parameters (and then gradients) are whole on the device at once under
#: ``learner.offload_optimizer = "step"``: the one computing and the next, which FSDP2
#: prefetches. Read from FSDP2's design, not measured.
IN_FLIGHT_LAYERS = 2
#: Rows the attention mask is counted at when the caller does not know (model.max_model_len is
#: better): HF turns a padding mask into a (rows, 1, T, T) bias per layer, 2 B x T per token.
DEFAULT_ROW_TOKENS = 2048


@dataclass(frozen=True)
class ModelShape:
    """What memory depends on in a decoder-only model: its HF ``config.json`` numbers."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied_embeddings: bool
    qkv_bias: bool = True

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> ModelShape:
        """From an HF ``config.json`` dict (Qwen2, Llama and alike)."""
        required = ("hidden_size", "num_hidden_layers", "num_attention_heads")
        missing = [k for k in (*required, "intermediate_size", "vocab_size") if k not in config]
        if missing:
            raise ValueError(f"the model's config.json has no {missing[0]!r}: not a decoder LM")
        hidden, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
        return cls(
            hidden=hidden,
            layers=int(config["num_hidden_layers"]),
            heads=heads,
            kv_heads=int(config.get("num_key_value_heads") or heads),
            head_dim=int(config.get("head_dim") or hidden // heads),
            intermediate=int(config["intermediate_size"]),
            vocab=int(config["vocab_size"]),
            tied_embeddings=bool(config.get("tie_word_embeddings", False)),
            # Qwen2 always has q/k/v biases (its config has no key for them); Llama-likes say.
            qkv_bias=bool(config.get("attention_bias", config.get("model_type") == "qwen2")),
        )

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in, out) of each linear of one decoder layer, by its HF name."""
        h, i = self.hidden, self.intermediate
        return {
            "q_proj": (h, self.q_dim),
            "k_proj": (h, self.kv_dim),
            "v_proj": (h, self.kv_dim),
            "o_proj": (self.q_dim, h),
            "gate_proj": (h, i),
            "up_proj": (h, i),
            "down_proj": (i, h),
        }

    @property
    def layer_parameters(self) -> int:
        linears = sum(a * b for a, b in self.linear_shapes().values())
        bias = self.q_dim + 2 * self.kv_dim if self.qkv_bias else 0
        return linears + bias + 2 * self.hidden  # two RMSNorms

    @property
    def embedding_parameters(self) -> int:
        return self.vocab * self.hidden

    @property
    def parameters(self) -> int:
        """Every parameter: embedding, layers, final norm, and an untied LM head."""
        head = 0 if self.tied_embeddings else self.embedding_parameters
        return self.embedding_parameters + self.layers * self.layer_parameters + self.hidden + head

    def lora_parameters(self, rank: int, targets: list[str]) -> int:
        """Adapter parameters: rank x (in + out) per targeted linear per layer (peft)."""
        shapes = self.linear_shapes()
        per_layer = sum(rank * sum(shapes[name]) for name in targets if name in shapes)
        return self.layers * per_layer

    def kv_bytes_per_token(self, dtype: str) -> int:
        """KV cache per token: keys and values of every layer, in the engine's dtype."""
        return 2 * self.layers * self.kv_dim * DTYPE_BYTES[dtype]


@dataclass(frozen=True)
class Precision:
    """Bytes per element of this learner's tensors (learner/policy.py ``precision``)."""

    param: int  # parameters, gradients, AdamW moments; also the residual stream
    compute: int  # matmul outputs (bf16 under autocast)
    autocast: bool  # fp32 master weights under bf16 autocast: linears cast their inputs

    @classmethod
    def of(cls, learner: LearnerConfig) -> Precision:
        compute = DTYPE_BYTES[learner.dtype]
        param = compute if learner.master_dtype == "same" else 4
        return cls(param=param, compute=compute, autocast=param != compute)

    @classmethod
    def of_stream(cls, learner: LearnerConfig, device: str = "cuda") -> Precision:
        """The precision the activations follow: the parameters' as :meth:`of` says, but a
        LoRA base in bf16 (``lora.base_dtype`` on ``device``) runs the residual stream in bf16
        and autocast has no input to cast (its weights are bf16 already)."""
        precision = cls.of(learner)
        if learner.bf16_lora_base(device):
            return cls(param=precision.compute, compute=precision.compute, autocast=False)
        return precision


@dataclass(frozen=True)
class LearnerState:
    """Bytes one learner rank keeps on its device besides activations."""

    weights: int  # the policy (frozen base included under LoRA)
    gradients: int  # of the trainable parameters, alive from backward to the optimiser step
    optimiser: int  # AdamW's two moments
    reference: int  # the frozen reference copy (beta > 0, full fine-tuning, frozen_copy)
    autocast_copies: int  # bf16 copies of fp32 weights autocast keeps through forward/backward
    optimiser_temporaries: int  # foreach AdamW's temporaries while it steps
    tied_gradients: int = 0  # extra copies while a tied embedding's two gradients are summed
    context: int = int(CUDA_CONTEXT_GIB * GIB)
    # weights.transport = "ipc": the serving-dtype copy of the whole model each rank keeps from
    # one export to the next, for its engine to read (learner/ipc_sender.py)
    export_copy: int = 0
    # offload_optimizer = "step": the FSDP2 units' parameters copied to the device for the
    # pass computing them (the root unit and IN_FLIGHT_LAYERS layers), and what stays in host
    # memory for the whole run (master weights, gradients, AdamW's moments); weights,
    # gradients and optimiser then count only what is on the device
    in_flight: int = 0
    host: int = 0

    @property
    def resident(self) -> int:
        """Held from one step to the next: everything but gradients and temporaries."""
        return self.weights + self.optimiser + self.reference + self.context + self.export_copy

    @property
    def backward(self) -> int:
        """Held through the backward pass, activations aside."""
        held = self.gradients + self.autocast_copies + self.tied_gradients + self.in_flight
        return self.resident + held

    @property
    def optimiser_step(self) -> int:
        """Held while AdamW steps (activations freed, autocast's cache gone)."""
        return self.resident + self.gradients + self.optimiser_temporaries

    def between_steps(self, optimiser_offloaded: bool = False) -> int:
        """Held while the engine generates: gradients are freed after each step (set to None),
        the moments too when ``learner.offload_optimizer`` moves them to the host."""
        return self.resident - (self.optimiser if optimiser_offloaded else 0)


#: Bytes per trained parameter of one AdamW moment by ``learner.optimizer``
#: (learner/optimizers.py): torchao's 8-bit moments are one byte per element plus an fp32 scale
#: per block of 256; ``adamw`` and ``adamw_bf16`` keep them in the parameters' dtype.
MOMENT_BYTES = {"adamw_8bit": 1 + 4 / 256}


def learner_state(
    shape: ModelShape,
    learner: LearnerConfig,
    device: str = "cuda",
    export_copy: int = 0,
    *,
    with_reference: bool = False,
) -> LearnerState:
    """One rank's state: FSDP2 shards weights, gradients, moments and the reference over
    ``learner.num_ranks`` (learner/sharding.py); the unsharded root unit is not counted.

    Reference, as learner/reference.py keeps it today: built only ``with_reference`` (the loss's
    beta > 0, ``[algorithm.loss]``: not the learner section's to say); under LoRA the
    base with the adapter off (no copy); ``frozen_copy`` a deep copy of the policy in the
    parameter dtype, or ``learner.reference_dtype`` as a learner on ``device`` resolves it
    (``"auto"``: bf16 on CUDA, the policy's on CPU); ``precomputed`` only on the host."""
    precision = Precision.of(learner)
    params, p = shape.parameters, precision.param
    lora = learner.lora
    trainable = lora_count = shape.lora_parameters(lora.rank, lora.target_modules)
    if not lora.enabled:
        trainable, lora_count = params, 0
    reference = 0
    if with_reference and not lora.enabled and learner.reference == "frozen_copy":
        reference = params * DTYPE_BYTES[learner.reference_dtype_on(device)]
    matmul = params - (0 if shape.tied_embeddings else shape.embedding_parameters)
    if _compiled_layers(learner, device):
        # the compiled layers cast each weight inside their graph and recompute the cast in
        # backward, so no copy outlives its use (docs/scaling.md); the LM head keeps its copy
        matmul -= shape.layers * shape.layer_parameters
    ranks = learner.num_ranks
    tied = 0
    if shape.tied_embeddings and not lora.enabled:
        # in the gradients' dtype, and whole on every rank: FSDP2 sums the two before it
        # reduce-scatters
        tied = TIED_GRADIENT_EXTRA_COPIES * shape.embedding_parameters * p
    base = DTYPE_BYTES["bfloat16"] if learner.bf16_lora_base(device) else p
    state = LearnerState(
        weights=(params * base + lora_count * p) // ranks,
        gradients=trainable * p // ranks,
        optimiser=int(2 * trainable * MOMENT_BYTES.get(learner.optimizer, p)) // ranks,
        reference=reference // ranks,
        # a bf16 base needs no copy: its matmuls read it as it is
        autocast_copies=2 * matmul // ranks if precision.autocast and base == p else 0,
        optimiser_temporaries=ADAMW_TEMPORARIES * trainable * p // ranks,
        tied_gradients=tied,
        export_copy=export_copy,
    )
    return on_the_host(state, shape, ranks) if learner.offload_optimizer == "step" else state


def on_the_host(state: LearnerState, shape: ModelShape, ranks: int) -> LearnerState:
    """``state`` with ``learner.offload_optimizer = "step"`` (learner/sharding.py): the sharded
    weights, gradients, moments and the optimiser's temporaries in host memory; on the device
    the units a pass computes, whole: the root unit (embedding, final norm, an untied head),
    alive through forward and backward, and IN_FLIGHT_LAYERS decoder layers, with their
    gradients until each is copied to the host. The frozen reference, autocast's bf16 copies
    and a tied embedding's summed gradients stay on the device as without it. On the host
    torch's AdamW takes its single-tensor path (foreach is for accelerators), whose temporaries
    are one parameter's: not counted."""
    layers = shape.layers * shape.layer_parameters
    whole = (shape.parameters - layers + IN_FLIGHT_LAYERS * shape.layer_parameters) / (
        shape.parameters
    )  # the fraction of the parameters whole on the device at once
    return replace(
        state,
        weights=0,
        gradients=int(state.gradients * ranks * whole),
        optimiser=0,
        optimiser_temporaries=0,
        in_flight=int(state.weights * ranks * whole),
        host=state.weights + state.gradients + state.optimiser,
    )


def layer_activation_bytes(
    shape: ModelShape,
    learner: LearnerConfig,
    row_tokens: int = DEFAULT_ROW_TOKENS,
    device: str = "cuda",
) -> int:
    """Bytes one decoder layer saves for backward per token (the module docstring's count) on a
    learner on ``device``."""
    precision = Precision.of_stream(learner, device)
    r, c, h, i = precision.param, precision.compute, shape.hidden, shape.intermediate
    norms = 2 * (2 * r * h)  # each RMSNorm keeps its input and its normalised output
    # q, k, v each cast the norm's output under autocast; otherwise they share it
    attention_input = 3 * c * h if precision.autocast else r * h
    # q, K and V repeated to every head, the kernel's output, o_proj's (contiguous) input, and
    # the padding mask as a bf16 bias (2 B x row length per token)
    attention = attention_input + 3 * c * h + 2 * c * h + 2 * row_tokens
    mlp_input = 2 * c * h if precision.autocast else r * h
    mlp = mlp_input + 4 * c * i  # gate out, SiLU out, up out, their product
    lora = 0
    if learner.lora.enabled:  # each adapter's lora_A casts the input again; lora_A's output
        shapes = shape.linear_shapes()
        targets = [n for n in learner.lora.target_modules if n in shapes]
        cast = c if precision.autocast else 0
        lora = sum(cast * shapes[n][0] + c * learner.lora.rank for n in targets)
    return norms + attention + mlp + lora


def activation_bytes_per_token(
    shape: ModelShape,
    learner: LearnerConfig,
    row_tokens: int = DEFAULT_ROW_TOKENS,
    checkpointed: int | None = None,
    device: str = "cuda",
) -> int:
    """Activation bytes of the policy's forward + backward per micro-batch token, at the peak
    of the backward pass, with ``checkpointed`` decoder layers (default: as
    ``learner.gradient_checkpointing`` says; required with ``"auto"``, which
    ``common.memory.fit.checkpointed_layers`` resolves from the run's memory terms), for a
    learner on ``device`` (``learner.share_prompts`` resolves per device).

    Without checkpointing every layer's saved tensors, plus one layer's worth for the gradients
    of the layer being differentiated. A checkpointed layer keeps only its input (the residual
    stream) and is recomputed in backward (its saved tensors and its gradients, one layer at a
    time). The checkpointed layers are the first k (learner/policy.py): backward reaches them
    after the later layers' saved tensors are freed, so the peak is k residuals + the L - k
    full layers + one layer's gradients; with all L checkpointed (HF's count) the last layer is
    recomputed at once, which makes it k residuals + two layers. ``logprob_chunk_tokens = 0``
    adds the full-vocabulary float32 logits of every token (learner/logprobs.py: no
    recompute); with chunks they are a fixed cost (:func:`logit_bytes`).
    """
    if checkpointed is None:  # "auto" depends on the state (reference dtype, export copy)
        checkpointed = configured_layers(shape, learner)
    layer = layer_activation_bytes(shape, learner, row_tokens, device)
    residual = Precision.of_stream(learner, device).param * shape.hidden
    if checkpointed:
        saved = checkpointed * residual + (max(shape.layers - checkpointed, 1) + 1) * layer
    else:
        saved = (shape.layers + 1) * layer
        if learner.share_prompts_on(device):  # off with a checkpointed layer (learner.py)
            saved = int(saved * SHARED_PROMPTS_FACTOR)
    if _compiled_layers(learner, device):
        saved = int(saved * COMPILED_ACTIVATION_FACTOR)
    final = 3 * residual  # the final norm's input and output, the hidden states the head reads
    logits = 0
    if learner.logprob_chunk_tokens <= 0:
        logits = LOGIT_TENSORS_AT_PEAK * 4 * shape.vocab
    return saved + final + logits


def _compiled_layers(learner: LearnerConfig, device: str) -> bool:
    """Whether a learner on ``device`` compiles its decoder layers and the count of a
    compiled step applies (measured on CUDA only)."""
    return device == "cuda" and learner.compile_on(device)


def logit_bytes(shape: ModelShape, learner: LearnerConfig, micro_batch_tokens: int) -> int:
    """The LM head's float32 logits at their peak, chunked: one chunk of
    ``logprob_chunk_tokens`` rows recomputed in backward (0: counted per token instead)."""
    chunk = learner.logprob_chunk_tokens
    if chunk <= 0:
        return 0
    lora = learner.lora
    wrapped = lora.enabled and "lm_head" in [*lora.target_modules, *lora.modules_to_save]
    tensors = LOGIT_TENSORS_AT_PEAK
    # one rank outside FSDP2 (no offload_optimizer = "step"), a plain head: learner/lm_head.py
    if learner.num_ranks == 1 and learner.offload_optimizer != "step" and not wrapped:
        tensors = HEAD_FUNCTION_LOGIT_TENSORS
    return tensors * 4 * shape.vocab * min(chunk, micro_batch_tokens)


class CheckpointedLayersError(ValueError):
    """``learner.gradient_checkpointing`` names more decoder layers than the model has."""


def configured_layers(shape: ModelShape, learner: LearnerConfig) -> int:
    """The decoder layers a fixed ``learner.gradient_checkpointing`` checkpoints (the first
    ones): true all, false none, an integer that many; ``"auto"`` is resolved by
    ``common/memory/fit.py`` from the run's memory terms. Raises
    :class:`CheckpointedLayersError` for more layers than the model has."""
    setting, layers = learner.gradient_checkpointing, shape.layers
    if setting == "auto":
        raise ValueError(
            "gradient_checkpointing = 'auto': pass checkpointed, from "
            "common.memory.fit.checkpointed_layers with the run's memory terms"
        )
    if isinstance(setting, bool):
        return layers if setting else 0
    if setting > layers:
        raise CheckpointedLayersError(
            f"learner.gradient_checkpointing ({setting}) is more than the model's {layers} "
            f"decoder layers: give at most {layers}, or true for all of them"
        )
    return setting


def gib(num_bytes: float) -> str:
    """Bytes as GiB with one decimal, for one-line messages."""
    return f"{num_bytes / GIB:.1f}"
