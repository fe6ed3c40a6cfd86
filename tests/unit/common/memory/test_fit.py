"""Without ``learner.memory_gib`` a GPU learner's micro-batches are fitted under its card
(``common.memory.fit.fit_card``): on a large card the fixed ``micro_batch_tokens`` stands (the
H200 rows were measured so), on a small one the step shrinks instead of running out of memory."""

from __future__ import annotations

import logging
import math
import re
from functools import partial

import pytest
import torch

from common.config import ConfigError, load_config
from common.memory.arithmetic import GIB, ModelShape
from common.memory.engine import SLEEPING_ENGINE_GIB
from common.memory.fit import (
    CARD_FILL,
    MIN_MICRO_BATCH_TOKENS,
    MemoryTargetError,
    MicroBatchFit,
    card_target_gib,
    fit_card,
    fit_micro_batch,
    learner_step_peak,
)
from common.memory.plan import card_reserve_gib, learner_fit, memory_terms, plan_memory
from learner.card import card_memory_gib
from tests.conftest import REPO_ROOT
from tests.unit.public_models import shape

ALL_LINEAR = '["q_proj","k_proj","v_proj","o_proj","gate_proj","up_proj","down_proj"]'
H100, H200, A100_40 = 79.1, 139.8, 39.4  # GiB, as torch reports them

#: These learners train with a KL term (beta 0.04, ``[algorithm.loss]``), so they keep a
#: reference, which the arithmetic counts where it is told so (``with_reference``).
fit_card = partial(fit_card, with_reference=True)
fit_micro_batch = partial(fit_micro_batch, with_reference=True)
learner_step_peak = partial(learner_step_peak, with_reference=True)


def learner(*overrides: str):
    """A GPU learner, at the defaults otherwise (compiled layers on CUDA)."""
    base = ["--learner.num_gpus", "1", "--learner.dtype", "bfloat16"]
    pairs = [f"--learner.{w}" if i % 2 == 0 else w for i, w in enumerate(overrides)]
    return load_config(None, base + pairs).learner


def peak_gib(model: ModelShape, config, fit) -> float:
    return learner_step_peak(model, config, fit.tokens, checkpointed=fit.checkpointed) / GIB


def test_the_7b_lora_row_shrinks_its_micro_batches_to_fit_an_80_gb_card():
    """Measured 78.1 GiB allocated on the H200 at 8192 tokens with the base in float32 (80.1
    by the count): on an H100's 79.1 that is an out-of-memory error waiting for the allocator's
    first free block. The default bf16 base (counted 47 GiB) needs no shrinking."""
    model = shape("qwen2.5-7b")
    lora = ("lora.enabled", "true", "lora.target_modules", ALL_LINEAR)
    assert fit_card(model, learner(*lora), H100) == MicroBatchFit(0, 8192)
    config = learner(*lora, "lora.base_dtype", "float32")
    big = fit_card(model, config, H200)
    assert (big.checkpointed, big.tokens) == (0, 8192)  # the row as measured
    small = fit_card(model, config, H100)
    assert small.checkpointed == 0 and 256 <= small.tokens < 8192
    assert peak_gib(model, config, small) <= card_target_gib(H100) < peak_gib(model, config, big)


def test_auto_checkpointing_fits_the_card_when_no_target_is_given():
    model = shape("qwen2.5-coder-1.5b")
    config = learner("gradient_checkpointing", "auto")
    assert fit_card(model, config, H200).checkpointed == 0
    fit = fit_card(model, config, A100_40)
    assert 0 < fit.checkpointed < model.layers and fit.tokens == 8192
    assert peak_gib(model, config, fit) <= card_target_gib(A100_40)


def test_a_target_or_no_card_leaves_the_fit_as_configured():
    model = shape("qwen2.5-coder-1.5b")
    target = learner("memory_gib", "60")
    assert fit_card(model, target, A100_40) == fit_micro_batch(model, target)
    assert fit_card(model, learner(), 0.0) == fit_micro_batch(model, learner())


def test_a_card_that_cannot_hold_the_state_is_named_in_one_line():
    with pytest.raises(MemoryTargetError) as refused:
        fit_card(shape("qwen2.5-7b"), learner(), H100)  # 7B full fine-tuning
    message = str(refused.value)
    assert message.startswith("the learner's card (79.1 GiB, 71.2 of it planned) cannot hold")
    assert "\n" not in message and "an explicit learner.memory_gib" in message
    need = float(re.search(r"a card of more than ([0-9.]+) GiB", message)[1])
    with pytest.raises(MemoryTargetError):  # the bound it names is a lower bound: below, no
        fit_card(shape("qwen2.5-7b"), learner(), need - 0.1)


def test_the_plan_fits_the_card_it_is_told_as_the_learner_does():
    model = shape("qwen2.5-7b")
    flags = ["--learner.num_gpus", "1", "--learner.dtype", "bfloat16"]
    flags += ["--algorithm.loss.beta", "0.04"]  # the plan reads it from the whole config
    flags += ["--learner.lora.enabled", "true", "--learner.lora.target_modules", ALL_LINEAR]
    flags += ["--learner.lora.base_dtype", "float32"]  # as measured; bf16 fits unshrunk
    config = load_config(None, [*flags, "--ray.gpu_memory_gib", str(H100)])
    assert learner_fit(config, model) == fit_card(model, config.learner, H100)
    assert learner_fit(config, model).tokens < 8192
    plan = plan_memory(config, model)
    assert plan.refusal is None and f"at {learner_fit(config, model).tokens} tokens" in "".join(
        plan.lines
    )
    # not even the state fits: refused before anything starts, as the learner would refuse
    full = load_config(None, [*flags[:6], "--ray.gpu_memory_gib", str(H100)])
    with pytest.raises(ConfigError, match=r"^the learner's card \(79.1 GiB"):
        learner_fit(full, model)


def test_a_colocated_learner_leaves_the_sleeping_engine_its_share_of_the_card():
    """On the RTX 3080 config without its target and with large micro-batches asked for: the
    learner plans to 90% of the card less the engine asleep, so the card holds both."""
    model = shape("qwen2.5-coder-0.5b")
    overrides = ["--learner.memory_gib", "0", "--learner.micro_batch_tokens", "65536"]
    config = load_config(
        REPO_ROOT / "configs" / "qwen2.5-coder-0.5b-lora-mbpp-1gpu.toml", overrides
    )
    card = config.ray.gpu_memory_gib
    assert card_reserve_gib(config) == SLEEPING_ENGINE_GIB > 0
    fit = learner_fit(config, model)
    terms = memory_terms(config, model)
    assert fit == fit_card(model, config.learner, card, SLEEPING_ENGINE_GIB, **terms)
    assert fit.tokens < 65536
    plan = plan_memory(config, model)
    assert plan.refusal is None, plan.refusal
    peak = learner_step_peak(
        model, config.learner, fit.tokens, checkpointed=fit.checkpointed, **terms
    )
    target = card_target_gib(card, SLEEPING_ENGINE_GIB)
    assert peak / GIB <= target and target + SLEEPING_ENGINE_GIB <= card
    # not colocated, nothing is left out
    alone = load_config(None, ["--learner.num_gpus", "1", "--rollout.colocate", "false"])
    assert card_reserve_gib(alone) == 0.0


def test_a_cpu_learner_has_no_card():
    assert card_memory_gib(torch.device("cpu")) == 0.0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_cuda_learner_fits_its_own_card(tiny_model_path, caplog):  # pragma: no cover
    from learner.learner import Learner

    card = card_memory_gib(torch.device("cuda"))
    assert card > 1
    with caplog.at_level(logging.INFO, logger="learner"):
        built = Learner(tiny_model_path, learner())
    assert built.fit.tokens == 8192  # a tiny model on any card: the fixed budget stands
    assert f"(the card: {card:.1f} GiB)" in caplog.text


def test_the_plan_says_what_fitting_the_card_leaves_it():
    model = shape("qwen2.5-7b")
    flags = ["--learner.num_gpus", "1", "--learner.dtype", "bfloat16"]
    flags += ["--learner.lora.enabled", "true", "--learner.lora.target_modules", ALL_LINEAR]
    flags += ["--learner.lora.base_dtype", "float32", "--model.max_model_len", "4096"]
    # the card unknown: planned as configured, and said to be fitted by the learner at start
    unknown = plan_memory(load_config(None, flags), model)
    assert any("fits them to its card when it starts" in line for line in unknown.lines)
    assert not unknown.warnings
    # a 40 GB card shrinks the micro-batches below one 4096-token sequence: a warning
    small = plan_memory(load_config(None, [*flags, "--ray.gpu_memory_gib", str(A100_40)]), model)
    assert len(small.warnings) == 1 and "fewer than one sequence" in small.warnings[0]
    # an H200 holds them: nothing to say
    big = plan_memory(load_config(None, [*flags, "--ray.gpu_memory_gib", str(H200)]), model)
    assert not big.warnings and not any("fits them" in line for line in big.lines)


def test_micro_batches_under_the_minimum_budget_run_where_the_card_holds_them():
    """The budget's minimum (256 tokens) is not a floor for a smaller micro_batch_tokens: a
    card that holds 64-token micro-batches but not 256 runs them, where it used to refuse. (The
    7B LoRA step without checkpointing: its 192 tokens between the two span the card plan's
    0.1 GiB steps, and its backward, not AdamW's step, is its peak.)"""
    model = shape("qwen2.5-7b")
    config = learner("lora.enabled", "true", "lora.target_modules", ALL_LINEAR)
    config = config.model_copy(update={"micro_batch_tokens": 64})
    peak = learner_step_peak(model, config, 64, checkpointed=0)
    target = math.ceil(peak / GIB * 10) / 10  # the card's plan, rounded as card_target_gib does
    card = target / CARD_FILL + 0.01
    assert card_target_gib(card) == target
    minimum = learner_step_peak(model, config, MIN_MICRO_BATCH_TOKENS, checkpointed=0)
    assert minimum > target * GIB  # the minimum budget does not fit this card
    assert fit_card(model, config, card) == MicroBatchFit(0, 64)
    with pytest.raises(MemoryTargetError, match="cannot hold its step"):
        fit_card(model, config.model_copy(update={"micro_batch_tokens": 8192}), card)
