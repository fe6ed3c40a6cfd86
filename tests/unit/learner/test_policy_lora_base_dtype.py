"""``learner.lora.base_dtype``: the frozen LoRA base in bf16 (half its memory), the adapters
float32, the same weights reaching the engines; by default on a CUDA learner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from common.config import ConfigError, LoraConfig, LossConfig, load_config
from common.memory.arithmetic import ModelShape, learner_state
from common.transport.cpu_safetensors import decode_update
from learner.learner import Learner
from tests.unit.learner.helpers import learner_config, tiny_samples


def _lora_learner(model: str, base_dtype: str, modules_to_save: tuple = ()) -> Learner:
    lora = LoraConfig(
        enabled=True, rank=4, base_dtype=base_dtype, modules_to_save=list(modules_to_save)
    )
    return Learner(model, learner_config(lora=lora, dtype="bfloat16"), loss=LossConfig(beta=0.05))


@pytest.mark.parametrize("modules_to_save", [(), ("embed_tokens",)])
def test_the_base_is_bf16_and_only_the_float32_adapters_train(tied_model, modules_to_save):
    """With the tied embedding trained in full (the LoRA demo's setting) its trained copy is
    float32 like the adapters; the frozen original stays bf16."""
    learner = _lora_learner(tied_model, "bfloat16", modules_to_save)
    trained = {n: p for n, p in learner.model.named_parameters() if p.requires_grad}
    frozen = {n: p for n, p in learner.model.named_parameters() if not p.requires_grad}
    assert all(p.dtype == torch.float32 for p in trained.values())
    full = [n for n in trained if "lora_" not in n]
    assert full == (["base_model.model.model.embed_tokens.modules_to_save.default.weight"]
                    if modules_to_save else [])  # fmt: skip
    assert frozen and all(p.dtype == torch.bfloat16 for p in frozen.values())
    before = {n: p.detach().clone() for n, p in learner.model.named_parameters()}
    learner.train_step(tiny_samples())  # lora_B starts at zero: A moves from the second step
    metrics = learner.train_step(tiny_samples())
    for name, param in learner.model.named_parameters():
        assert (not torch.equal(before[name], param.detach())) == (name in trained), name
    assert metrics["train/kl"] > 0


def test_the_engines_get_the_same_weights_whichever_dtype_holds_the_base(tied_model):
    """The checkpoint is bf16, so a float32 base holds the same values: with the same adapters
    the merged export must be equal, bit for bit."""
    bf16, fp32 = _lora_learner(tied_model, "bfloat16"), _lora_learner(tied_model, "float32")
    bf16.train_step(tiny_samples())
    bf16.train_step(tiny_samples())
    adapters = {n: p for n, p in bf16.model.named_parameters() if "lora_" in n}
    with torch.no_grad():
        for name, param in fp32.model.named_parameters():
            if name in adapters:
                param.copy_(adapters[name])
    sent = [dict(decode_update(learner.export_weights())) for learner in (bf16, fp32)]
    assert sent[0].keys() == sent[1].keys()
    for name in sent[0]:
        assert torch.equal(sent[0][name], sent[1][name]), name


def test_the_count_holds_the_base_at_two_bytes_a_parameter(tied_model):
    shape = ModelShape.from_config(json.loads((Path(tied_model) / "config.json").read_text()))
    for base in ("bfloat16", "float32"):
        learner = _lora_learner(tied_model, base)
        held = sum(p.numel() * p.element_size() for p in learner.model.parameters())
        state = learner_state(shape, learner.config, "cpu")
        assert state.weights == held, base


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--learner.lora.enabled", "true"], "needs lora.enabled = true and learner.dtype"),
        (["--learner.dtype", "bfloat16"], "needs lora.enabled = true and learner.dtype"),
    ],
)  # fmt: skip
def test_a_bf16_base_where_it_cannot_run_is_refused_in_one_line(flags, said):
    with pytest.raises(ConfigError, match=said):
        load_config(None, [*flags, "--learner.lora.base_dtype", "bfloat16"])


def test_auto_keeps_the_base_in_bf16_where_it_can_run_on_cuda_and_float32_elsewhere():
    """``lora.base_dtype = "auto"`` (the default), as ``reference_dtype``'s: bf16 for a CUDA
    learner computing in bf16, of one rank or several (tests/unit/learner/test_sharding.py);
    float32 on CPU, in float32 compute, or when asked; no LoRA, no base to keep. The memory
    count follows the resolution."""
    from common.config import LearnerConfig

    def config(**overrides) -> LearnerConfig:
        fields = {"lora": LoraConfig(enabled=True), "dtype": "bfloat16", **overrides}
        return LearnerConfig(**fields)

    assert config().lora.base_dtype == "auto"
    assert config().bf16_lora_base("cuda")
    assert not config().bf16_lora_base("cpu")
    assert config(num_ranks=2).bf16_lora_base("cuda")
    assert not config(dtype="float32").bf16_lora_base("cuda")
    assert not config(lora=LoraConfig(enabled=True, base_dtype="float32")).bf16_lora_base("cuda")
    assert config(lora=LoraConfig(enabled=True, base_dtype="bfloat16")).bf16_lora_base("cpu")
    assert not config(lora=LoraConfig()).bf16_lora_base("cuda")
    from tests.unit.public_models import shape as public_shape

    shape = public_shape("qwen2.5-coder-0.5b")
    lora = shape.lora_parameters(8, ["q_proj", "k_proj", "v_proj", "o_proj"])
    for device, base in (("cuda", 2), ("cpu", 4)):
        weights = learner_state(shape, config(), device=device).weights
        assert weights == shape.parameters * base + lora * 4, device
    sharded = learner_state(shape, config(num_ranks=2), device="cuda").weights
    assert sharded == (shape.parameters * 2 + lora * 4) // 2  # each rank half of the bf16 base
