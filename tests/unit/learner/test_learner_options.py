"""Learner options beyond plain GRPO: mu epochs, TIS, references, KL in reward, bf16, resume."""

from __future__ import annotations

import pytest
import torch

from bench.learner.perturb import PerturbableLearner
from common.config import LoraConfig, LossConfig
from learner.learner import Learner
from tests.unit.learner.helpers import learner_config, save_tiny_qwen2, snapshot, tiny_samples


def _lora(**overrides) -> LoraConfig:
    return LoraConfig(enabled=True, rank=4, **overrides)


def test_two_epochs_take_the_ratio_off_one(tied_model):
    clip = LossConfig(clip_eps_low=0.02, clip_eps_high=0.02)
    learner = Learner(tied_model, learner_config(ppo_epochs=2), loss=clip)
    before = snapshot(learner)
    metrics = learner.train_step(tiny_samples())
    assert metrics["train/optimizer_steps"] == 2
    # epoch 1 is on pi_old (ratio 1); epoch 2 sees the policy that epoch 1 produced
    assert abs(metrics["train/ratio_mean_last_epoch"] - 1.0) > 1e-4
    assert metrics["train/clip_frac_last_epoch"] > 0
    assert learner.weight_version == 1  # one version per train_step, however many steps
    for name, param in learner.model.named_parameters():
        assert not torch.equal(before[name], param.detach()), name


def test_mini_batches_take_one_optimizer_step_each(tied_model):
    learner = Learner(tied_model, learner_config(mini_batches=3))
    metrics = learner.train_step(tiny_samples())
    assert metrics["train/optimizer_steps"] == 3
    assert metrics["train/num_samples"] == 8


def test_tis_metrics(tied_model):
    samples = tiny_samples()  # sampler logprob -4 on every token; the tiny model gives about -4.9
    metrics = Learner(tied_model, learner_config()).train_step(samples)
    assert 0 < metrics["train/tis_weight_mean"] < 1
    assert metrics["train/tis_clip_frac"] == 0
    off = Learner(tied_model, learner_config(), loss=LossConfig(tis_cap=0.0)).train_step(samples)
    assert "train/tis_weight_mean" not in off


def test_precomputed_reference_equals_frozen_copy(tied_model):
    samples = tiny_samples()
    results = []
    for mode in ("frozen_copy", "precomputed"):
        config = learner_config(reference=mode)
        learner = PerturbableLearner(tied_model, config, loss=LossConfig(beta=0.05))
        learner.perturb_weights_(0.02, seed=1)
        policy_before = learner.score(samples)
        ref = learner.reference_logprobs(samples)
        assert learner.score(samples) == policy_before  # weights swapped back
        metrics = learner.train_step(samples)
        results.append((ref, metrics["train/kl"], snapshot(learner)))
    (ref_a, kl_a, params_a), (ref_b, kl_b, params_b) = results
    assert kl_a > 0 and kl_a == pytest.approx(kl_b, rel=1e-5)
    for a, b in zip(ref_a, ref_b):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)
    for name, param in params_a.items():
        torch.testing.assert_close(params_b[name], param, msg=name)


def test_kl_in_reward(tied_model):
    from algorithm.loss import kl_divergence

    samples = tiny_samples()
    in_reward = LossConfig(beta=0.05, kl_in="reward", kl_estimator="k1")
    learner = PerturbableLearner(tied_model, learner_config(), loss=in_reward)
    assert learner.sequence_kl(samples) == (0.05, [0.0] * len(samples))  # policy == reference
    learner.perturb_weights_(0.02, seed=1)
    beta, kl = learner.sequence_kl(samples)
    assert beta == 0.05
    policy, ref = learner.policy_logprobs(samples), learner.reference_logprobs(samples)
    for got, p, r in zip(kl, policy, ref):
        assert got == pytest.approx(kl_divergence(p, r, "k1").sum().item(), abs=1e-5)
    assert any(abs(k) > 1e-4 for k in kl)
    assert learner.train_step(samples)["train/kl"] == 0.0  # no KL term in the loss
    no_ref = Learner(tied_model, learner_config(), loss=LossConfig(kl_in="reward"))
    assert no_ref.reference is None and no_ref.sequence_kl(samples)[1] == [0.0] * len(samples)


def test_bfloat16_mixed_precision_keeps_float32_master_weights(tied_model):
    learner = Learner(tied_model, learner_config(dtype="bfloat16", lr=1e-5))
    assert all(p.dtype == torch.float32 for p in learner.model.parameters())
    assert learner.autocast_dtype == torch.bfloat16
    before = snapshot(learner)
    metrics = learner.train_step(tiny_samples())
    assert all(torch.isfinite(torch.tensor(v)) for v in metrics.values())
    # at lr 1e-5 most updates are below bf16 resolution; fp32 master weights keep them all
    for name, param in learner.model.named_parameters():
        assert not torch.equal(before[name], param.detach()), name


@pytest.mark.parametrize("lora", ["off", "adapter", "adapter+norm", "adapter+embedding"])
def test_resume_round_trip(tied_model, tmp_path, lora):
    kinds = {
        "off": LoraConfig(),
        "adapter": _lora(),
        "adapter+norm": _lora(modules_to_save=["model.norm"]),
        "adapter+embedding": _lora(modules_to_save=["embed_tokens"]),  # tied to the LM head
    }
    config = learner_config(lora=kinds[lora])
    samples = tiny_samples()
    learner = Learner(tied_model, config)
    learner.train_step(samples)
    learner.train_step(samples)  # lora_B starts at 0: two steps so every adapter weight moves
    learner.save_checkpoint(str(tmp_path / "ckpt"))
    resumed = Learner(tied_model, config)  # the original path: the reference stays initial
    resumed.load_training_state(str(tmp_path / "ckpt"))
    assert (resumed.weight_version, resumed.step) == (2, 2)
    want, got = snapshot(learner), snapshot(resumed)
    for name, param in want.items():
        torch.testing.assert_close(got[name], param, msg=name)
    # the optimiser state came back too: one more step lands on the same weights
    learner.train_step(samples)
    resumed.train_step(samples)
    want, got = snapshot(learner), snapshot(resumed)
    for name, param in want.items():
        torch.testing.assert_close(got[name], param, msg=name)


def test_adapter_export_writes_the_trained_adapter_of_each_version(tied_model, tmp_path):
    from safetensors.torch import load

    lora = learner_config(lora=_lora(export="adapter"))
    learner = Learner(tied_model, lora, adapter_dir=str(tmp_path))
    first = learner.export_weights()
    learner.train_step(tiny_samples())
    second = learner.export_weights()
    assert first.transport == second.transport == "lora_adapter"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v000000", "v000001"]
    for update in (first, second):  # the files travel with the update
        assert {"adapter_config.json", "adapter_model.safetensors"} <= set(update.payload)
    a = load(first.payload["adapter_model.safetensors"])
    b = load(second.payload["adapter_model.safetensors"])
    assert set(a) == set(b) and all("lora_" in name for name in a)
    assert any(not torch.equal(a[name], b[name]) for name in a)
    with pytest.raises(ValueError, match=r"lora\.enabled"):
        Learner(tied_model, learner_config()).save_adapter(str(tmp_path / "full"))


def test_a_compiled_policy_gives_the_eager_gradients(tmp_path, monkeypatch):
    """``learner.compile``: the decoder layers (the policy's and the frozen reference's) and
    the LM head's softmax math run compiled (inductor's CPU kernels), the math does not move.
    Measured on this model: largest relative gradient difference 6.7e-7 over the parameters
    (6.4e-7 with the layers alone; fp32 sums in another order), identical loss; bound 1e-5."""
    from learner.learner import Learner
    from tests.unit.learner.head_helpers import spy_kernels

    calls = spy_kernels(monkeypatch)  # the compiled LM-head kernels run, not only the flag
    model = save_tiny_qwen2(tmp_path / "model", tie_word_embeddings=True)
    losses, grads = [], []
    for compiled in (False, True):
        learner = Learner(model, learner_config(compile=compiled), loss=LossConfig(beta=0.05))
        losses.append(learner.accumulate_gradients(tiny_samples())["train/loss"])
        grads.append({n: p.grad.clone() for n, p in learner.model.named_parameters()})
        if compiled:  # the policy's layers, the reference's, the LM head's softmax math
            for model in (learner.model, learner.reference.frozen):
                layers = model.model.layers
                assert all(layer._compiled_call_impl is not None for layer in layers)
            assert learner.trainer.fused_head
            # the reference's pass and the policy's forward, then the policy's backward
            assert calls[0] == "row_stats" and {"row_stats", "logit_grad"} == set(calls)
        else:
            assert not calls
    assert losses[1] == pytest.approx(losses[0], rel=1e-5)
    for name, grad in grads[0].items():
        scale = grad.abs().max().item() or 1.0
        assert (grads[1][name] - grad).abs().max().item() <= 1e-5 * scale, name
