"""The memory plan: what a GPU run will hold on each card, printed before anything starts.

From the config and the resolved model's ``config.json`` (the arithmetic of
``common/memory/arithmetic.py``, not a measurement): the learner's state, its activations at the
micro-batch budget, the reference, the engine's weights and KV cache, and the card. A colocated run
(``rollout.colocate``: an engine and a learner rank share each GPU) peaks at the larger of

- the learner's step + what a sleeping engine keeps (its weights in host memory or dropped,
  its KV cache freed; its CUDA context and runtime stay), and
- the engine awake (weights + KV cache + runtime) + what the learner keeps between steps
  (weights, the reference, and AdamW's moments unless ``learner.offload_optimizer`` moves them
  to the host while the engine generates; with ``"step"`` the weights and moments live on the
  host for the whole run, and the plan prints the host memory they take);

a colocated config whose peak exceeds ``ray.gpu_memory_gib`` is refused in one line that says
what to change. A learner or engine on a GPU of its own that exceeds the card is a warning.
CPU runs have no plan.

``python -m common.memory.plan --table`` prints docs/scaling.md's "what fits where".
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

from common.config import Config, ConfigError, LearnerConfig, load_config
from common.help_format import DefaultsHelpFormatter
from common.memory.arithmetic import (
    DTYPE_BYTES,
    GIB,
    CheckpointedLayersError,
    ModelShape,
    activation_bytes_per_token,
    gib,
    learner_state,
    logit_bytes,
)
from common.memory.engine import (
    SLEEPING_ENGINE_GIB,
    EngineMemory,
    engine_memory,
    kv_cache_tokens,
)
from common.memory.fit import (
    MAX_MICRO_BATCH_TOKENS,
    MemoryTargetError,
    MicroBatchFit,
    fit_card,
    fit_micro_batch,
    learner_step_peak,
)

logger = logging.getLogger("common.memory.plan")


@dataclass
class MemoryPlan:
    """The plan's lines for the log, and its verdict: a refusal (one line) or warnings."""

    lines: list[str] = field(default_factory=list)
    refusal: str | None = None
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Sides:
    """The byte counts the verdict compares."""

    step_peak: int  # the learner's step
    fit: MicroBatchFit  # the learner's checkpointed layers and micro-batch budget
    layers: int  # the model's decoder layers
    between_steps: int  # what the learner keeps while the engine generates
    engine: EngineMemory


def read_shape(model_path: str) -> ModelShape | None:
    """The shape in ``model_path``'s config.json: the local directory the driver resolved, a
    config.json file, or a hub name's cached config.json; None when there is none locally yet
    (a hub model the actors will download)."""
    path = Path(model_path).expanduser()
    if path.is_dir():
        path = path / "config.json"
    elif not path.is_file():
        # lazy: a hub name only (the driver resolves most models to a directory)
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(model_path, "config.json")
        if not isinstance(cached, str):
            return None
        path = Path(cached)
    try:
        return ModelShape.from_config(json.loads(path.read_text()))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"model.path: cannot read the model's shape from {path}: {exc}") from None


def memory_terms(config: Config, shape: ModelShape) -> dict:
    """What the learner's arithmetic needs beyond its section: the learner's device (its
    "auto" settings resolve per device), the copy of the whole model in the serving dtype each
    rank gathers for its engine under ``weights.transport = "ipc"`` (learner/ipc_sender.py), and
    whether it keeps a reference (the loss's beta > 0)."""
    ipc = config.weights.transport == "ipc"
    return {
        "device": "cuda" if config.learner.num_gpus else "cpu",
        "export_copy": shape.parameters * DTYPE_BYTES[config.model.dtype] if ipc else 0,
        "with_reference": config.algorithm.loss.beta > 0,
    }


def card_reserve_gib(config: Config) -> float:
    """What a learner rank's card holds besides it while it steps: a colocated engine asleep
    (``rollout.colocate`` on GPUs), which the learner leaves out of the card it fits."""
    colocated = config.rollout.colocate and config.learner.num_gpus > 0
    return SLEEPING_ENGINE_GIB if colocated else 0.0


def learner_fit(config: Config, shape: ModelShape) -> MicroBatchFit:
    """The learner's checkpointed layers and micro-batch budget, as the learner will derive
    them (``learner.gradient_checkpointing``, ``learner.memory_gib``; without a target, a GPU
    learner fits its card, which the plan knows as ``ray.gpu_memory_gib``). Refuses a memory target
    whose budget is shorter than one sequence of ``model.max_model_len`` tokens: such a
    sequence would still run, alone, past the target (learner/batching.py)."""
    learner, terms = config.learner, memory_terms(config, shape)
    card = config.ray.gpu_memory_gib if terms["device"] == "cuda" else 0.0
    try:
        try:
            fit = fit_card(shape, learner, card, card_reserve_gib(config), **terms)
        except MemoryTargetError:
            if learner.memory_gib or not config.rollout.colocate:
                raise
            # colocated: the plan's verdict on the card says so, with what to change (the
            # learner would refuse to start with the card's arithmetic)
            fit = fit_micro_batch(shape, learner, **terms)
    except (MemoryTargetError, CheckpointedLayersError) as exc:
        raise ConfigError(str(exc)) from None
    longest = _longest_sequence(config)
    if learner.memory_gib and fit.tokens < longest:
        raise ConfigError(
            f"learner.memory_gib ({learner.memory_gib:g}) gives micro-batches of {fit.tokens} "
            f"tokens, fewer than one sequence of model.max_model_len ({longest}), which would "
            f"run alone past the target: {_holding_one(shape, learner, longest, terms)}, or a "
            f"smaller model.max_model_len"
        )
    return fit


def _longest_sequence(config: Config) -> int:
    """The longest sequence a micro-batch must hold: ``model.max_model_len``, at most the
    budget's ceiling."""
    return min(config.model.max_model_len, MAX_MICRO_BATCH_TOKENS)


def _holding_one(shape: ModelShape, learner: LearnerConfig, longest: int, terms: dict) -> str:
    """The advice: the smallest memory target (to 0.1 GiB) whose budget holds ``longest``
    tokens, checked by the learner's own derivation; under "auto" with micro_batch_tokens
    raised to ``longest``, since "auto" checkpoints for micro_batch_tokens."""
    update: dict = {}
    if learner.gradient_checkpointing == "auto" and learner.micro_batch_tokens < longest:
        update["micro_batch_tokens"] = longest
    target = math.floor(learner.memory_gib * 10) / 10
    for _ in range(10_000):  # 1 TiB in tenths: past any card
        target = round(target + 0.1, 1)
        trial = learner.model_copy(update={**update, "memory_gib": target})
        try:
            if fit_micro_batch(shape, trial, **terms).tokens >= longest:
                break
        except MemoryTargetError:
            continue
    else:
        return "no memory target holds one"
    advice = f"give learner.memory_gib >= {target:g}"
    if update:
        advice += f" with learner.micro_batch_tokens >= {longest}"
    return advice


def plan_memory(config: Config, shape: ModelShape) -> MemoryPlan:
    """The plan of ``config`` on a model of ``shape`` (see the module docstring)."""
    learner, rollout = config.learner, config.rollout
    fit = learner_fit(config, shape)
    terms = memory_terms(config, shape)
    state = learner_state(shape, learner, **terms)
    engine = engine_memory(
        shape, config.model.dtype, rollout.kv_cache_gib, rollout.tensor_parallel_size
    )
    offloaded = learner.offload_optimizer == "while_generating"
    sides = _Sides(
        learner_step_peak(shape, learner, fit.tokens, checkpointed=fit.checkpointed, **terms),
        fit,
        shape.layers,
        state.between_steps(offloaded and rollout.colocate),
        engine,
    )
    plan = MemoryPlan()
    plan.lines.append(_learner_line(shape, learner, fit, sides.step_peak, terms))
    if terms["device"] == "cuda" and not learner.memory_gib:
        _note_card_fit(config, fit, plan)
    tokens_held = kv_cache_tokens(shape, config.model.dtype, rollout.kv_cache_gib)
    plan.lines.append(
        f"engine: weights {gib(engine.weights)} GiB ({config.model.dtype}) + KV cache "
        f"{gib(engine.kv_cache)} ({tokens_held} tokens) + runtime and context "
        f"{gib(engine.runtime + engine.context)} = {gib(engine.awake)} GiB awake, "
        f"{gib(engine.asleep)} asleep"
    )
    _judge(config, sides, plan)
    return plan


def _note_card_fit(config: Config, fit: MicroBatchFit, plan: MemoryPlan) -> None:
    """What fitting the card (no ``learner.memory_gib``) means for this plan: without
    ``ray.gpu_memory_gib`` the plan does not know the card each learner rank fits at start; with
    it, a micro-batch the card shrank below one sequence of ``model.max_model_len`` lets a
    longer sequence run alone past the card's plan (a warning)."""
    if not config.ray.gpu_memory_gib:
        plan.lines.append(
            "learner rank: micro-batches of learner.micro_batch_tokens as planned; each rank "
            "fits them to its card when it starts (fewer tokens where the card cannot hold "
            "them; ray.gpu_memory_gib tells this plan the card)"
        )
        return
    longest = _longest_sequence(config)
    if fit.tokens < min(config.learner.micro_batch_tokens, longest):
        plan.warnings.append(
            f"memory plan: the card ({config.ray.gpu_memory_gib:g} GiB) holds micro-batches of "
            f"{fit.tokens} tokens, fewer than one sequence of model.max_model_len "
            f"({longest}): a longer one runs alone past the card's plan; checkpoint layers "
            f"(learner.gradient_checkpointing = 'auto') or lower model.max_model_len"
        )


def _learner_line(
    shape: ModelShape, learner: LearnerConfig, fit: MicroBatchFit, peak: int, terms: dict
) -> str:
    state, copy = learner_state(shape, learner, **terms), terms["export_copy"]
    tokens = fit.tokens
    per_token = activation_bytes_per_token(
        shape, learner, checkpointed=fit.checkpointed, device=terms["device"]
    )
    in_flight = f"units in flight {gib(state.in_flight)}, " if state.host else ""
    host = (
        f"; in host memory {gib(state.host)} GiB (master weights, gradients, AdamW: "
        "learner.offload_optimizer = 'step')"
        if state.host
        else ""
    )
    return (
        f"learner rank: state {gib(state.backward)} GiB (weights {gib(state.weights)}, "
        f"{in_flight}gradients {gib(state.gradients)}, AdamW {gib(state.optimiser)}, reference "
        f"{gib(state.reference)}, autocast copies {gib(state.autocast_copies)}, "
        f"{f'tied gradients {gib(state.tied_gradients)}, ' if state.tied_gradients else ''}"
        f"{f'IPC export copy {gib(copy)}, ' if copy else ''}CUDA context "
        f"{gib(state.context)}); activations {gib(tokens * per_token)} at {tokens} tokens per "
        f"micro-batch ({fit.checkpointed} of {shape.layers} layers checkpointed) + LM head "
        f"{gib(logit_bytes(shape, learner, tokens))}; step peak {gib(peak)} GiB{host}"
    )


def _judge(config: Config, sides: _Sides, plan: MemoryPlan) -> None:
    """The card line, and the refusal or warnings."""
    card = config.ray.gpu_memory_gib
    if config.rollout.colocate:
        learning = sides.step_peak + sides.engine.asleep
        generating = sides.engine.awake + sides.between_steps
        peak = max(learning, generating)
        arithmetic = (
            f"max(learner step {gib(sides.step_peak)} + sleeping engine "
            f"{gib(sides.engine.asleep)}, engine awake {gib(sides.engine.awake)} + learner "
            f"between steps {gib(sides.between_steps)})"
        )
        if not card:
            plan.lines.append(
                f"card: colocated peak {gib(peak)} GiB = {arithmetic}; not enforced: "
                "ray.gpu_memory_gib = 0 (unknown)"
            )
        elif peak > card * GIB:
            plan.refusal = (
                f"memory plan: rollout.colocate needs {gib(peak)} GiB on a {card:g} GiB card "
                f"(ray.gpu_memory_gib) = {arithmetic}; {_advice(config, sides, learning, card)}"
            )
        else:
            plan.lines.append(
                f"card: colocated peak {gib(peak)} GiB = {arithmetic}, of {card:g} GiB: fits"
            )
        return
    plan.lines.append(
        "card: the learner's rank and the engine on GPUs of their own"
        + (f" of {card:g} GiB" if card else " (ray.gpu_memory_gib = 0: not checked)")
    )
    for name, need in (("learner step", sides.step_peak), ("engine", sides.engine.awake)):
        if card and need > card * GIB:
            plan.warnings.append(
                f"memory plan: the {name} needs {gib(need)} GiB, more than the {card:g} GiB "
                "card (ray.gpu_memory_gib): expect an out-of-memory error"
            )


def _advice(config: Config, sides: _Sides, learning: int, card: float) -> str:
    """What to change, for the side that peaks."""
    learner, rollout = config.learner, config.rollout
    if learning >= sides.engine.awake + sides.between_steps:
        changes = ["a smaller learner.micro_batch_tokens (or learner.memory_gib)"]
        if sides.fit.checkpointed < sides.layers:
            changes.insert(0, "learner.gradient_checkpointing = true")
        if not learner.lora.enabled:
            changes.append("learner.lora.enabled = true")
            if learner.offload_optimizer != "step":
                changes.append("learner.offload_optimizer = 'step'")
        if learner.dtype == "bfloat16" and learner.master_dtype == "float32":
            changes.append("learner.master_dtype = 'same'")
        return "try " + ", ".join(changes) + ", or a bigger card"
    room = card * GIB - (sides.engine.awake - sides.engine.kv_cache) - sides.between_steps
    changes = []
    if room >= 0.25 * GIB:
        fits = math.floor(room / GIB * 10) / 10  # rounded down: the advice must fit
        changes.append(f"rollout.kv_cache_gib <= {fits:g} (now {rollout.kv_cache_gib:g})")
    if learner.offload_optimizer == "never" and not learner.lora.enabled:
        changes.append("learner.offload_optimizer = 'while_generating'")
    if room < 0 and not learner.lora.enabled:  # the weights alone leave the KV cache no room
        changes.append("learner.lora.enabled = true")
    if not changes:
        return "the engine and the learner's resident state alone exceed the card: a bigger card"
    return "try " + ", ".join(changes)


def check_memory_plan(config: Config, model_path: str) -> None:
    """Log the plan of a GPU run; raise ConfigError (exit status 2 in launch.train) when a
    colocated config cannot fit the card. CPU runs get no plan, only the check that
    ``learner.memory_gib`` holds a micro-batch (else the learner would refuse it inside its
    actor, as a traceback)."""
    on_gpu = bool(config.rollout.num_gpus or config.learner.num_gpus)
    if not (on_gpu or config.learner.memory_gib):
        return
    shape = read_shape(model_path)
    if shape is None:
        logger.warning("memory plan: not made, %s has no config.json here yet", model_path)
        return
    if not on_gpu:
        learner_fit(config, shape)  # ConfigError when the target is too small
        return
    plan = plan_memory(config, shape)
    for line in plan.lines:
        logger.info("memory plan: %s", line)
    for warning in plan.warnings:
        logger.warning("%s", warning)
    if plan.refusal:
        raise ConfigError(plan.refusal)


# ---- docs/scaling.md's table -------------------------------------------------------------

#: torch's total memory of each card (``torch.cuda.get_device_properties``): A100 and H100 from
#: their datasheets, H200 as a run reported it; a 24 GB card (RTX 3090 / 4090, L4, A10) at the
#: least of them.
CARDS = {"24 GB": 22.0, "40 GB": 39.4, "80 GB": 79.1, "141 GB": 139.8}
#: The shapes of the public models (their config.json; tests/unit/model_configs/).
PUBLIC_SHAPES = {
    "Qwen2.5-Coder-0.5B": ModelShape(896, 24, 14, 2, 64, 4864, 151936, True),
    "Qwen2.5-Coder-1.5B": ModelShape(1536, 28, 12, 2, 128, 8960, 151936, True),
    "Qwen2.5-7B": ModelShape(3584, 28, 28, 4, 128, 18944, 152064, False),
}
ALL_LINEARS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
#: The table's setting: bf16 autocast over fp32 masters, gradient checkpointing, micro-batches
#: of 8192 tokens in rows of 640 (128 + 512), a colocated engine with an 8 GiB KV cache.
TABLE_TOKENS, TABLE_ROW, TABLE_KV_GIB = 8192, 640, 8.0


#: The table's kinds of training: (label, LoRA, learner.offload_optimizer).
TABLE_TRAINING = (
    ("full", False, "never"),
    ("full, state on host", False, "step"),
    ("LoRA r16", True, "never"),
)


def _table_learner(lora: bool, offload: str = "never") -> LearnerConfig:
    return LearnerConfig(
        dtype="bfloat16",
        gradient_checkpointing=True,
        offload_optimizer=offload,
        lora={"enabled": lora, "rank": 16, "target_modules": ALL_LINEARS},
    )


def fit_table() -> str:
    """Markdown: each model x training x reference, its step peak, and where it fits."""
    head = "| model | training | reference | learner step (GiB) | " + " | ".join(CARDS) + " |"
    rows = [head, "|" + "---|" * (4 + len(CARDS))]
    for name, shape in PUBLIC_SHAPES.items():
        engine = engine_memory(shape, "bfloat16", TABLE_KV_GIB)
        for training, lora, offload in TABLE_TRAINING:
            for reference in (True, False):
                learner = _table_learner(lora, offload)
                step = learner_step_peak(
                    shape, learner, TABLE_TOKENS, row_tokens=TABLE_ROW, with_reference=reference
                )
                between = learner_state(shape, learner, with_reference=reference).between_steps()
                colocated = max(step + engine.asleep, engine.awake + between)
                cells = [
                    "both" if colocated <= c * GIB else "alone" if step <= c * GIB else "no"
                    for c in CARDS.values()
                ]
                rows.append(
                    f"| {name} | {training} | {'yes' if reference else 'no'} | {gib(step)} | "
                    + " | ".join(cells)
                    + " |"
                )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m common.memory.plan",
        formatter_class=DefaultsHelpFormatter,
        description="Print a run's GPU memory plan (arithmetic, common/memory/arithmetic.py), or "
        "the table of what fits where.",
        epilog="Any --section.key VALUE pair overrides the config file, as in launch.train",
    )
    parser.add_argument("--table", action="store_true", help="docs/scaling.md's table")
    parser.add_argument("--config", help="TOML config file")
    parser.add_argument("--model-config", help="the model's config.json (or its directory)")
    args, overrides = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    if args.table:
        print(fit_table())
        return 0
    if not args.model_config:
        parser.error("give --table, or --model-config (with --config)")
    try:
        config = load_config(args.config, overrides)
        shape = read_shape(args.model_config)
        if shape is None:
            raise ConfigError(f"--model-config: no config.json at {args.model_config}")
        plan = plan_memory(config, shape)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(plan.lines + plan.warnings + ([plan.refusal] if plan.refusal else [])))
    return 1 if plan.refusal else 0


if __name__ == "__main__":
    sys.exit(main())
