"""Without ``learner.memory_gib`` a GPU learner's micro-batches are fitted under its card
(``common.memory_fit.fit_card``): on a large card the fixed ``micro_batch_tokens`` stands (the
H200 rows were measured so), on a small one the step shrinks instead of running out of memory."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch

from common.config import load_config
from common.memory import GIB, ModelShape
from common.memory_fit import (
    CARD_FILL,
    MemoryTargetError,
    fit_card,
    fit_micro_batch,
    learner_step_peak,
)
from launch.fleet.memory_plan import learner_fit, plan_memory
from learner.card import card_memory_gib

CONFIGS = Path(__file__).parent / "model_configs"
ALL_LINEAR = '["q_proj","k_proj","v_proj","o_proj","gate_proj","up_proj","down_proj"]'
H100, H200, A100_40 = 79.1, 139.8, 39.4  # GiB, as torch reports them


def shape(name: str) -> ModelShape:
    return ModelShape.from_config(json.loads((CONFIGS / f"{name}.json").read_text()))


def learner(*overrides: str):
    """A GPU learner with a reference, at the defaults otherwise (compiled layers on CUDA)."""
    base = ["--learner.num_gpus", "1", "--learner.dtype", "bfloat16", "--learner.beta", "0.04"]
    pairs = [f"--learner.{w}" if i % 2 == 0 else w for i, w in enumerate(overrides)]
    return load_config(None, base + pairs).learner


def planned(card: float) -> float:
    """The step a learner plans to on ``card`` (to 0.1 GiB, as fit_card rounds it)."""
    return round(CARD_FILL * card, 1)


def peak_gib(model: ModelShape, config, fit) -> float:
    return learner_step_peak(model, config, fit.tokens, checkpointed=fit.checkpointed) / GIB


def test_the_7b_lora_row_shrinks_its_micro_batches_to_fit_an_80_gb_card():
    """Measured 78.1 GiB allocated on the H200 at 8192 tokens (80.1 by the count): on an H100's
    79.1 that is an out-of-memory error waiting for the allocator's first free block."""
    model = shape("qwen2.5-7b")
    config = learner("lora.enabled", "true", "lora.target_modules", ALL_LINEAR)
    big = fit_card(model, config, H200)
    assert (big.checkpointed, big.tokens) == (0, 8192)  # the row as measured
    small = fit_card(model, config, H100)
    assert small.checkpointed == 0 and 256 <= small.tokens < 8192
    assert peak_gib(model, config, small) <= planned(H100) < peak_gib(model, config, big)


def test_auto_checkpointing_fits_the_card_when_no_target_is_given():
    model = shape("qwen2.5-coder-1.5b")
    config = learner("gradient_checkpointing", "auto")
    assert fit_card(model, config, H200).checkpointed == 0
    fit = fit_card(model, config, A100_40)
    assert 0 < fit.checkpointed < model.layers and fit.tokens == 8192
    assert peak_gib(model, config, fit) <= planned(A100_40)


def test_a_target_or_no_card_leaves_the_fit_as_configured():
    model = shape("qwen2.5-coder-1.5b")
    target = learner("memory_gib", "60")
    assert fit_card(model, target, A100_40) == fit_micro_batch(model, target)
    assert fit_card(model, learner(), 0.0) == fit_micro_batch(model, learner())


def test_a_card_that_cannot_hold_the_state_is_named_in_one_line():
    with pytest.raises(MemoryTargetError) as refused:
        fit_card(shape("qwen2.5-7b"), learner(), H100)  # 7B full fine-tuning
    message = str(refused.value)
    assert message.startswith("the card's 79.1 GiB (90% of it, 71.2, planned) cannot hold")
    assert "\n" not in message and "learner.memory_gib" not in message


def test_the_plan_fits_the_card_it_is_told_as_the_learner_does():
    model = shape("qwen2.5-7b")
    flags = ["--learner.num_gpus", "1", "--learner.dtype", "bfloat16", "--learner.beta", "0.04"]
    flags += ["--learner.lora.enabled", "true", "--learner.lora.target_modules", ALL_LINEAR]
    config = load_config(None, [*flags, "--ray.gpu_memory_gib", str(H100)])
    assert learner_fit(config, model) == fit_card(model, config.learner, H100)
    assert learner_fit(config, model).tokens < 8192
    plan = plan_memory(config, model)
    assert plan.refusal is None and f"at {learner_fit(config, model).tokens} tokens" in "".join(
        plan.lines
    )
    # not even the state fits: the plan's verdict, not the card's arithmetic error
    full = load_config(None, [*flags[:6], "--ray.gpu_memory_gib", str(H100)])
    assert learner_fit(full, model) == fit_micro_batch(model, full.learner)


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
