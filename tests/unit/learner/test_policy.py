"""Checkpointing the first k decoder layers (learner/policy.py ``checkpoint_layers``): the same
gradients as without, less kept for backward, under LoRA, compile and in the Learner."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch

from common.config import LearnerConfig
from common.memory.arithmetic import GIB, ModelShape
from common.memory.fit import learner_step_peak
from learner.learner import Learner
from learner.policy import checkpoint_layers, decoder_layers
from tests.unit.learner.helpers import learner_config, tiny_samples

LAYERS = 4


def _tiny_qwen2() -> torch.nn.Module:
    """A random 4-layer Qwen2 in float64, built offline (same seed every call)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=LAYERS,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
        tie_word_embeddings=True,
        use_cache=False,
    )
    torch.manual_seed(0)
    return Qwen2ForCausalLM(config).to(torch.float64)


def _gradients(model: torch.nn.Module) -> tuple[dict[str, torch.Tensor], int]:
    """Every trainable parameter's gradient of a next-token loss on a fixed padded batch, and
    the bytes autograd kept for backward outside checkpointed regions."""
    ids = torch.randint(1, 64, (3, 12), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[0, 9:] = 0  # one padded row: the mask path the learner runs
    kept = []

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        kept.append(tensor.numel() * tensor.element_size())
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        logits = model(input_ids=ids, attention_mask=mask).logits
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    return grads, sum(kept)


def test_checkpointed_layers_give_the_same_gradients_and_keep_less():
    reference, kept_without = _gradients(_tiny_qwen2())
    kept = {}
    for k in (0, 1, 3, LAYERS):
        model = _tiny_qwen2()
        checkpoint_layers(model, k)
        grads, kept[k] = _gradients(model)
        assert grads.keys() == reference.keys()
        for name, grad in grads.items():
            # the recompute runs the same float64 kernels on the same inputs: bit for bit
            assert torch.equal(grad, reference[name]), (k, name)
    assert kept[0] == kept_without
    assert kept_without > kept[1] > kept[3] > kept[LAYERS]  # each layer keeps only its input


def test_the_first_layers_are_the_checkpointed_ones_and_too_many_are_refused():
    model = _tiny_qwen2()
    checkpoint_layers(model, 2)
    wrapped = ["forward" in vars(layer) for layer in decoder_layers(model)]
    assert wrapped == [True, True, False, False]
    with pytest.raises(ValueError, match="cannot checkpoint 5 of 4 decoder layers"):
        checkpoint_layers(_tiny_qwen2(), 5)


def test_lora_adapters_get_the_same_gradients_through_checkpointed_layers():
    from peft import LoraConfig, get_peft_model

    def lora_model(k: int) -> torch.nn.Module:
        model = get_peft_model(_tiny_qwen2(), LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
        for name, param in model.named_parameters():
            if "lora_B" in name:  # peft starts B at zero: a gradient must reach A as well
                torch.nn.init.normal_(param, std=0.1, generator=torch.Generator().manual_seed(2))
        checkpoint_layers(model, k)
        return model

    reference, _ = _gradients(lora_model(0))
    grads, _ = _gradients(lora_model(3))
    assert grads.keys() == reference.keys() and len(grads) == 4 * LAYERS  # A and B of q and v
    for name, grad in grads.items():
        assert grad.abs().sum() > 0, name
        assert torch.equal(grad, reference[name]), name


@pytest.mark.parametrize(("checkpointing", "expected"), [(1, 1), (True, 2), ("auto", 1)])
def test_the_learner_gives_the_same_gradients_with_checkpointed_layers(
    tied_model, checkpointing, expected, caplog
):
    def gradients(config: LearnerConfig) -> dict[str, torch.Tensor]:
        learner = Learner(tied_model, config)
        learner.accumulate_gradients(tiny_samples())
        return {n: p.grad.clone() for n, p in learner.model.named_parameters()}

    reference = gradients(learner_config())
    extra = {}
    if checkpointing == "auto":  # a target between the peaks with 0 and with 1 layer
        shape = ModelShape.from_config(json.loads((Path(tied_model) / "config.json").read_text()))
        tokens = learner_config().micro_batch_tokens
        peaks = [
            learner_step_peak(shape, learner_config(), tokens, device="cpu", checkpointed=k)
            for k in (0, 1)
        ]
        extra = {"memory_gib": sum(peaks) / 2 / GIB}
    with caplog.at_level(logging.INFO, logger="learner"):
        learner = Learner(tied_model, learner_config(gradient_checkpointing=checkpointing, **extra))
    assert learner.fit.checkpointed == expected
    assert learner.share_prompts == (expected == 0)
    assert f"{expected} of 2 decoder layers checkpointed" in caplog.text
    grads = gradients(learner_config(gradient_checkpointing=checkpointing, **extra))
    for name, grad in grads.items():
        # float32, and prompt sharing on in the reference: the existing gradient tests' bound
        torch.testing.assert_close(grad, reference[name], atol=1e-6, rtol=1e-4, msg=name)


def test_the_learner_refuses_more_layers_than_the_model_has(tied_model):
    with pytest.raises(ValueError, match=r"^learner.gradient_checkpointing \(3\) is more than"):
        Learner(tied_model, learner_config(gradient_checkpointing=3))


def test_checkpointed_layers_compose_with_compiled_layers(tied_model):
    """A checkpointed layer compiled (its wrapper compiles with it, checkpoint and all) gives
    the eager gradients. Measured on this model: largest difference 5.1e-7 relative to each
    parameter's largest gradient (inductor sums in another order); bound 1e-5, as
    test_learner_options' compile test."""
    grads = []
    for options in ({}, {"compile": True, "gradient_checkpointing": 1}):
        learner = Learner(tied_model, learner_config(**options))
        learner.accumulate_gradients(tiny_samples())
        grads.append({n: p.grad.clone() for n, p in learner.model.named_parameters()})
    assert learner.model.model.layers[0]._compiled_call_impl is not None
    assert "forward" in vars(learner.model.model.layers[0])
    worst = 0.0
    for name, grad in grads[0].items():
        scale = grad.abs().max().item() or 1.0
        worst = max(worst, (grads[1][name] - grad).abs().max().item() / scale)
    assert worst <= 1e-5
