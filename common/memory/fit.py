"""A learner rank's step fitted to memory, by the arithmetic of ``common/memory/arithmetic.py``: the
micro-batch token budget under ``learner.memory_gib`` (or the card's memory), and the decoder
layers ``learner.gradient_checkpointing = "auto"`` checkpoints. The learner derives its budget
here when it starts and the driver's memory plan prints the same before anything starts.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.config import LearnerConfig
from common.memory.arithmetic import (
    DEFAULT_ROW_TOKENS,
    GIB,
    LearnerState,
    ModelShape,
    activation_bytes_per_token,
    configured_layers,
    gib,
    learner_state,
    logit_bytes,
)


def learner_step_peak(
    shape: ModelShape,
    learner: LearnerConfig,
    micro_batch_tokens: int,
    *,
    device: str = "cuda",
    row_tokens: int = DEFAULT_ROW_TOKENS,
    export_copy: int = 0,
    checkpointed: int | None = None,
    with_reference: bool = False,
) -> int:
    """One rank's peak over a train step: the backward of a full micro-batch, or AdamW's step
    (``checkpointed`` layers as in :func:`activation_bytes_per_token`; ``with_reference``: the
    loss has a KL term, :func:`learner_state`)."""
    state = learner_state(shape, learner, device, export_copy, with_reference=with_reference)
    if checkpointed is None:
        checkpointed = checkpointed_layers(
            shape, learner, device, row_tokens, export_copy, with_reference=with_reference
        )
    per_token = activation_bytes_per_token(shape, learner, row_tokens, checkpointed, device)
    backward = (
        state.backward
        + micro_batch_tokens * per_token
        + logit_bytes(shape, learner, micro_batch_tokens)
    )
    return max(backward, state.optimiser_step)


class MemoryTargetError(ValueError):
    """``learner.memory_gib`` leaves no room for a micro-batch."""


#: The range a derived micro-batch budget is clamped to. Below it a micro-batch holds a few
#: rows of an MBPP step and the step runs nearly row by row; above it (2^18) no rollout batch
#: of the shipped configs needs more than one micro-batch.
MIN_MICRO_BATCH_TOKENS = 256
MAX_MICRO_BATCH_TOKENS = 1 << 18


def micro_batch_budget(
    shape: ModelShape,
    learner: LearnerConfig,
    device: str = "cuda",
    row_tokens: int = DEFAULT_ROW_TOKENS,
    export_copy: int = 0,
    checkpointed: int | None = None,
    *,
    with_reference: bool = False,
) -> int:
    """The micro-batch token budget that keeps one rank's step under ``learner.memory_gib``:
    (target - state held through backward - the LM head's chunk) / activation bytes per token
    with ``checkpointed`` layers (default: as configured), clamped to [MIN_MICRO_BATCH_TOKENS,
    MAX_MICRO_BATCH_TOKENS]. Raises :class:`MemoryTargetError` when the target cannot hold
    the smallest."""
    terms = (device, row_tokens, export_copy)
    if checkpointed is None:
        checkpointed = checkpointed_layers(shape, learner, *terms, with_reference=with_reference)
    target = int(learner.memory_gib * GIB)
    state = learner_state(shape, learner, device, export_copy, with_reference=with_reference)
    fixed, per_token = _step_bytes(shape, learner, checkpointed, state, row_tokens, device)
    tokens = (target - fixed) // per_token
    if tokens < MIN_MICRO_BATCH_TOKENS or state.optimiser_step > target:
        need = max(fixed + MIN_MICRO_BATCH_TOKENS * per_token, state.optimiser_step)
        raise MemoryTargetError(
            f"learner.memory_gib ({learner.memory_gib:g}) cannot hold a micro-batch of "
            f"{MIN_MICRO_BATCH_TOKENS} tokens: the state alone is {gib(state.backward)} GiB "
            f"(weights {gib(state.weights)}, gradients {gib(state.gradients)}, AdamW "
            f"{gib(state.optimiser)}, reference {gib(state.reference)}); it needs at least "
            f"{gib(need)} GiB, or LoRA / master_dtype = 'same'{_or_step(learner, ' / ')}"
        )
    return int(min(tokens, MAX_MICRO_BATCH_TOKENS))


def _or_step(learner: LearnerConfig, separator: str) -> str:
    """The advice to keep the state on the host, where it is not there already."""
    if learner.offload_optimizer == "step" or learner.lora.enabled:
        return ""
    return f"{separator}offload_optimizer = 'step'"


def _step_bytes(
    shape: ModelShape,
    learner: LearnerConfig,
    checkpointed: int,
    state: LearnerState,
    row_tokens: int,
    device: str,
) -> tuple[int, int]:
    """A step's bytes through backward whatever the micro-batch (``state`` and the LM head's
    chunk), and its activation bytes per micro-batch token with ``checkpointed`` layers."""
    fixed = state.backward + logit_bytes(shape, learner, MAX_MICRO_BATCH_TOKENS)
    return fixed, activation_bytes_per_token(shape, learner, row_tokens, checkpointed, device)


@dataclass(frozen=True)
class MicroBatchFit:
    """How a learner rank's step is fitted to memory: decoder layers checkpointed (the first
    ones) and the micro-batch token budget."""

    checkpointed: int
    tokens: int


def fit_micro_batch(
    shape: ModelShape,
    learner: LearnerConfig,
    *,
    device: str = "cuda",
    row_tokens: int = DEFAULT_ROW_TOKENS,
    export_copy: int = 0,
    with_reference: bool = False,
) -> MicroBatchFit:
    """``learner.gradient_checkpointing`` resolved on this shape, and the micro-batch budget:
    ``learner.micro_batch_tokens``, or with ``learner.memory_gib`` :func:`micro_batch_budget`
    at those layers. Raises :class:`CheckpointedLayersError` or :class:`MemoryTargetError`."""
    terms = (device, row_tokens, export_copy)
    checkpointed = checkpointed_layers(shape, learner, *terms, with_reference=with_reference)
    if not learner.memory_gib:
        return MicroBatchFit(checkpointed, learner.micro_batch_tokens)
    budget = micro_batch_budget(shape, learner, *terms, checkpointed, with_reference=with_reference)
    return MicroBatchFit(checkpointed, budget)


def checkpointed_layers(
    shape: ModelShape,
    learner: LearnerConfig,
    device: str = "cuda",
    row_tokens: int = DEFAULT_ROW_TOKENS,
    export_copy: int = 0,
    *,
    with_reference: bool = False,
) -> int:
    """How many decoder layers (the first ones) ``learner.gradient_checkpointing`` checkpoints
    on this shape: true all, false none, an integer that many; ``"auto"`` the fewest with
    which a micro-batch of ``learner.micro_batch_tokens`` fits ``learner.memory_gib`` (all
    when none does: :func:`micro_batch_budget` then shrinks the micro-batch), none without a
    target. Raises :class:`CheckpointedLayersError` for more layers than the model has."""
    setting, layers = learner.gradient_checkpointing, shape.layers
    if setting == "auto":
        if not learner.memory_gib:
            return 0
        state = learner_state(shape, learner, device, export_copy, with_reference=with_reference)
        target = int(learner.memory_gib * GIB)
        for count in range(layers):
            fixed, per_token = _step_bytes(shape, learner, count, state, row_tokens, device)
            if (target - fixed) // per_token >= learner.micro_batch_tokens:
                return count
        # None fits: all of them, and micro_batch_budget shrinks the micro-batch. L measured
        # smaller than L - 1 (docs/benchmarks.md "Checkpointed layers on CPU"): with the last
        # layer kept, its saved tensors meet the LM head's; recomputed, they do not.
        return layers
    return configured_layers(shape, learner)


#: What a learner with no ``learner.memory_gib`` plans a step to on a CUDA card: this fraction
#: of the card's memory (less what another process keeps there: a colocated engine asleep).
#: The rest is a design margin for what the count does not see (the caching allocator's free
#: blocks and fragmentation) and for the count's own error.
CARD_FILL = 0.9


def card_target_gib(card_gib: float, reserve_gib: float = 0.0) -> float:
    """The step a learner with no ``learner.memory_gib`` plans to on a card of ``card_gib``
    of which another process keeps ``reserve_gib`` (to 0.1 GiB)."""
    return round((card_gib - reserve_gib) * CARD_FILL, 1)


def fit_card(
    shape: ModelShape,
    learner: LearnerConfig,
    card_gib: float = 0.0,
    reserve_gib: float = 0.0,
    **terms,
) -> MicroBatchFit:
    """:func:`fit_micro_batch`, with the learner's card as a ceiling when no
    ``learner.memory_gib`` is set: ``learner.micro_batch_tokens``, or fewer where a step of
    them would pass :func:`card_target_gib`, and ``gradient_checkpointing = "auto"``
    checkpoints the fewest layers that fit the card. On a large card the fixed budget stands;
    on a small one a step shrinks to fit instead of running out of memory. ``card_gib = 0``
    (CPU, or unknown): :func:`fit_micro_batch` alone. Raises :class:`MemoryTargetError`
    naming the card when not even the state fits it."""
    if learner.memory_gib or not card_gib:
        return fit_micro_batch(shape, learner, **terms)
    target = card_target_gib(card_gib, reserve_gib)
    planned = learner.model_copy(update={"memory_gib": target})
    try:
        fit = fit_micro_batch(shape, planned, **terms)
    except MemoryTargetError:
        small = _under_the_minimum(shape, planned, **terms)
        if small is not None:
            return small
        state = learner_state(
            shape,
            learner,
            terms.get("device", "cuda"),
            terms.get("export_copy", 0),
            with_reference=terms.get("with_reference", False),
        )
        held = max(state.backward, state.optimiser_step)  # before a single token
        need = held / GIB / CARD_FILL + reserve_gib
        raise MemoryTargetError(
            f"the learner's card ({card_gib:.1f} GiB, {target:g} of it planned) cannot hold "
            f"its step: the state alone is {gib(held)} GiB; it needs a card of more than "
            f"{need:.1f} GiB, LoRA, master_dtype = 'same'{_or_step(learner, ', learner.')}, "
            "more learner.num_ranks, or an explicit learner.memory_gib"
        ) from None
    return MicroBatchFit(fit.checkpointed, min(fit.tokens, learner.micro_batch_tokens))


def _under_the_minimum(shape: ModelShape, planned: LearnerConfig, **terms) -> MicroBatchFit | None:
    """``micro_batch_tokens`` below MIN_MICRO_BATCH_TOKENS where the card holds them: the
    budget refuses what cannot hold its minimum, but a smaller configured micro-batch may fit
    (``planned``: the learner with the card's target as its ``memory_gib``)."""
    tokens = planned.micro_batch_tokens
    if tokens >= MIN_MICRO_BATCH_TOKENS:
        return None
    checkpointed = checkpointed_layers(shape, planned, **terms)
    peak = learner_step_peak(shape, planned, tokens, checkpointed=checkpointed, **terms)
    return MicroBatchFit(checkpointed, tokens) if peak <= planned.memory_gib * GIB else None
