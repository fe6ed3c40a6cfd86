"""The Learner on a tiny random Qwen2 built offline: steps, LoRA, micro-batching, export."""

from __future__ import annotations

import json

import pytest
import torch

from bench.learner.perturb import PerturbableLearner
from common.config import LearnerConfig, LoraConfig, LossConfig
from common.transport.cpu_safetensors import decode_update
from learner.batching import pack_micro_batches
from learner.learner import Learner
from learner.logprobs import _full_logits_logprobs, completion_logprobs
from tests.unit.learner.helpers import (
    BASE_OPTIONS,
    learner_config,
    save_tiny_qwen2,
    snapshot,
    tiny_samples,
)


@pytest.fixture(scope="module")
def untied_model(tmp_path_factory) -> str:
    return save_tiny_qwen2(tmp_path_factory.mktemp("untied"), tie_word_embeddings=False)


def test_train_step_changes_every_trainable_parameter(tied_model):
    learner = Learner(tied_model, learner_config(), loss=LossConfig(beta=0.05))
    before = snapshot(learner)
    metrics = learner.train_step(tiny_samples())
    for name, param in learner.model.named_parameters():
        assert not torch.equal(before[name], param.detach()), f"{name} did not change"
    assert learner.weight_version == 1
    for key in ("loss", "kl", "clip_frac", "grad_norm", "logprob_diff_mean", "entropy"):
        assert torch.isfinite(torch.tensor(metrics[f"train/{key}"])), key
    assert metrics["train/num_tokens"] == sum(len(s.completion_token_ids) for s in tiny_samples())
    assert metrics["train/clip_frac"] == 0.0  # mu = 1: ratio is exactly 1
    assert metrics["train/kl"] == 0.0  # policy == reference before the first update


@pytest.mark.parametrize("modules_to_save", [[], ["model.norm"]])
def test_lora_step_changes_only_the_adapter(tied_model, modules_to_save):
    lora = LoraConfig(enabled=True, rank=4, modules_to_save=modules_to_save)
    learner = Learner(tied_model, learner_config(lora=lora), loss=LossConfig(beta=0.05))
    names = [n for n, p in learner.model.named_parameters() if p.requires_grad]
    saved = [n for n in names if "lora_" not in n]
    # "model.norm" is the final RMSNorm alone, not the per-layer *_layernorm
    norm = "base_model.model.model.norm.modules_to_save.default.weight"
    assert names and saved == ([norm] if modules_to_save else [])
    before = snapshot(learner)
    # lora_B starts at zero, so lora_A gets no gradient until B has moved: take two steps.
    learner.train_step(tiny_samples())
    metrics = learner.train_step(tiny_samples())
    for name, param in learner.model.named_parameters():
        changed = not torch.equal(before[name], param.detach())
        assert changed == (name in names), name  # the base, norm's original included, is frozen
    assert metrics["train/kl"] > 0  # the adapter moved the policy away from the base


@pytest.mark.parametrize(
    "aggregation", ["seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm"]
)
def test_micro_batches_give_the_full_batch_gradient(tied_model, aggregation):
    samples = tiny_samples()
    grads, losses = [], []
    for budget in (4096, 16):  # one micro-batch vs one sample per micro-batch
        config = learner_config(micro_batch_tokens=budget)
        loss = LossConfig(beta=0.05, aggregation=aggregation)
        learner = PerturbableLearner(tied_model, config, loss=loss)
        learner.perturb_weights_(0.02, seed=1)  # so the reference differs from the policy
        assert (len(pack_micro_batches(samples, budget)) > 1) == (budget == 16)
        metrics = learner.accumulate_gradients(samples)
        losses.append(metrics["train/loss"])
        grads.append({n: p.grad.clone() for n, p in learner.model.named_parameters()})
    assert losses[0] == pytest.approx(losses[1], rel=1e-5)
    for name, grad in grads[0].items():
        torch.testing.assert_close(grads[1][name], grad, atol=1e-6, rtol=1e-4, msg=name)


def test_gradient_checkpointing_gives_the_same_gradient(tied_model):
    grads = []
    for checkpointing in (False, True):
        learner = Learner(tied_model, learner_config(gradient_checkpointing=checkpointing))
        learner.accumulate_gradients(tiny_samples())
        grads.append({n: p.grad.clone() for n, p in learner.model.named_parameters()})
    for name, grad in grads[0].items():
        torch.testing.assert_close(grads[1][name], grad, atol=1e-6, rtol=1e-4, msg=name)


def test_the_lm_head_in_one_piece_gives_the_same_gradient(tied_model):
    grads = []
    for chunk in (3, 0):  # checkpointed chunks of 3 tokens; all tokens at once, kept
        learner = Learner(tied_model, learner_config(logprob_chunk_tokens=chunk))
        learner.accumulate_gradients(tiny_samples())
        grads.append({n: p.grad.clone() for n, p in learner.model.named_parameters()})
    for name, grad in grads[0].items():
        torch.testing.assert_close(grads[1][name], grad, atol=1e-6, rtol=1e-4, msg=name)


@pytest.mark.parametrize("lora", [False, True])
def test_chunked_logprobs_match_full_logits(tied_model, lora):
    learner = PerturbableLearner(tied_model, learner_config(lora=LoraConfig(enabled=lora)))
    learner.perturb_weights_(0.05, seed=2)
    from learner.batching import collate

    samples = tiny_samples()
    batch = collate(samples, list(range(len(samples))))
    args = (learner.model, batch.input_ids, batch.attention_mask, batch.completion_mask, 0.7)
    chunked, chunked_entropy = completion_logprobs(*args, chunk_tokens=5, return_entropy=True)
    full, full_entropy = _full_logits_logprobs(*args, return_entropy=True)
    torch.testing.assert_close(chunked, full, atol=1e-5, rtol=0)
    torch.testing.assert_close(chunked_entropy, full_entropy, atol=1e-5, rtol=0)
    whole, whole_entropy = completion_logprobs(*args, chunk_tokens=0, return_entropy=True)
    torch.testing.assert_close(whole, full, atol=1e-5, rtol=0)  # 0: the head in one piece
    torch.testing.assert_close(whole_entropy, full_entropy, atol=1e-5, rtol=0)
    assert (chunked[batch.completion_mask == 0] == 0).all()
    # Independent check of the shift: the token at t is predicted from position t - 1.
    with torch.no_grad():
        logits = learner.model(input_ids=batch.input_ids[:1]).logits[0].float() / 0.7
    p = len(samples[batch.indices[0]].prompt_token_ids)
    token = batch.input_ids[0, p]
    expected = torch.log_softmax(logits[p - 1], dim=-1)[token]
    assert chunked[0, p].item() == pytest.approx(expected.item(), abs=1e-5)


def test_logprob_diff_is_zero_when_sampler_agrees(tied_model):
    learner = Learner(tied_model, learner_config())
    samples = tiny_samples()
    logprobs = learner.score(samples)
    assert [len(lp) for lp in logprobs] == [len(s.completion_token_ids) for s in samples]
    for sample, lp in zip(samples, logprobs):
        sample.sampler_logprobs = lp
    metrics = learner.train_step(samples)
    assert metrics["train/logprob_diff_mean"] < 1e-5
    after = learner.score(samples)
    assert after != logprobs  # the step changed the policy


def _decoded(learner: Learner) -> tuple[int, dict[str, torch.Tensor]]:
    update = learner.export_weights()
    return update.version, dict(decode_update(update))


def test_export_tied_sends_embedding_not_lm_head(tied_model):
    learner = Learner(tied_model, learner_config())
    learner.train_step(tiny_samples())
    version, tensors = _decoded(learner)
    assert version == learner.weight_version == 1
    expected = set(learner.model.state_dict()) - {"lm_head.weight"}
    assert set(tensors) == expected
    assert all(t.dtype == torch.bfloat16 for t in tensors.values())  # config.json's dtype
    for name, param in learner.model.state_dict().items():
        if name in tensors:
            torch.testing.assert_close(tensors[name], param.to(torch.bfloat16), msg=name)


def test_export_untied_sends_lm_head(untied_model):
    learner = Learner(untied_model, learner_config())
    _, tensors = _decoded(learner)
    assert set(tensors) == set(learner.model.state_dict())
    assert "lm_head.weight" in tensors


def test_export_lora_equals_peft_merge_and_keeps_the_adapter(tied_model):
    import copy

    learner = PerturbableLearner(tied_model, learner_config(lora=LoraConfig(enabled=True, rank=4)))
    learner.perturb_weights_(0.1, seed=3)  # lora_B is zero at init; make the delta non-zero
    learner.export_dtype = torch.float32  # compare without bf16 rounding
    samples = tiny_samples()
    logprobs_before = learner.score(samples)
    _, tensors = _decoded(learner)
    merged = copy.deepcopy(learner.model).merge_and_unload().state_dict()
    assert set(tensors) == set(merged) - {"lm_head.weight"}
    for name, tensor in tensors.items():
        torch.testing.assert_close(tensor, merged[name], atol=1e-6, rtol=1e-5, msg=name)
    base_q = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(
        tensors[base_q],
        learner.model.get_base_model().state_dict()[
            "model.layers.0.self_attn.q_proj.base_layer.weight"
        ],
    )
    assert learner.score(samples) == logprobs_before  # adapter still live, unmerged


@pytest.mark.parametrize("modules_to_save", [["model.norm"], ["norm"]])
def test_export_lora_sends_the_trained_modules_to_save(tied_model, modules_to_save):
    import copy

    from transformers import AutoModelForCausalLM

    lora = LoraConfig(enabled=True, rank=4, modules_to_save=modules_to_save)
    learner = Learner(tied_model, learner_config(lora=lora))
    learner.train_step(tiny_samples())
    learner.export_dtype = torch.float32  # compare without bf16 rounding
    _, tensors = _decoded(learner)
    hf_names = set(AutoModelForCausalLM.from_pretrained(tied_model).state_dict())
    assert set(tensors) == hf_names - {"lm_head.weight"}
    wrapped = {
        name: module
        for name, module in learner.model.get_base_model().named_modules()
        if hasattr(module, "original_module")
    }
    # "model.norm": the final norm; "norm": every name ending in it, *_layernorm included
    assert len(wrapped) == (1 if modules_to_save == ["model.norm"] else 5)
    for name, module in wrapped.items():
        trained = module.modules_to_save["default"].weight.detach()
        assert not torch.equal(trained, module.original_module.weight), name
        torch.testing.assert_close(tensors[f"{name}.weight"], trained, atol=0, rtol=0)
    merged = copy.deepcopy(learner.model).merge_and_unload().state_dict()
    for name, tensor in tensors.items():
        torch.testing.assert_close(tensor, merged[name], atol=1e-6, rtol=1e-5, msg=name)


@pytest.mark.parametrize("modules_to_save", [["model.norm"], ["embed_tokens"]])
def test_exported_lora_policy_serves_the_learners_logits(tied_model, modules_to_save):
    """A plain HF model loaded with the export (LM head re-tied, as the engines do) computes
    the learner's logits: a trained tied embedding must reach the head, not only the input."""
    from transformers import AutoModelForCausalLM

    lora = LoraConfig(enabled=True, rank=4, modules_to_save=modules_to_save)
    learner = Learner(tied_model, learner_config(lora=lora))
    learner.train_step(tiny_samples())
    learner.train_step(tiny_samples())
    learner.export_dtype = torch.float32
    _, tensors = _decoded(learner)
    served = AutoModelForCausalLM.from_pretrained(tied_model, dtype=torch.float32)
    missing, unexpected = served.load_state_dict(tensors, strict=False)
    assert (missing, unexpected) == (["lm_head.weight"], [])
    assert served.lm_head.weight.data_ptr() == served.model.embed_tokens.weight.data_ptr()
    input_ids = torch.tensor([[3, 17, 42, 99, 5, 64]])
    with torch.no_grad():
        want = learner.model(input_ids=input_ids).logits
        got = served(input_ids=input_ids).logits
        with learner.model.disable_adapter():
            initial = learner.model(input_ids=input_ids).logits
    assert not torch.allclose(want, initial, atol=1e-3)  # training moved the policy
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_perturb_changes_weights_and_version(tied_model):
    learner = PerturbableLearner(tied_model, learner_config())
    before = learner.score(tiny_samples())
    learner.perturb_weights_(0.05, seed=0)
    assert learner.weight_version == 1
    assert learner.score(tiny_samples()) != before


def test_checkpoint_round_trip(tied_model, tmp_path):
    learner = Learner(tied_model, learner_config())
    learner.train_step(tiny_samples())
    learner.save_checkpoint(str(tmp_path / "ckpt"))
    files = {p.name for p in (tmp_path / "ckpt").iterdir()}
    assert {"config.json", "model.safetensors", "optimizer.pt", "learner_state.json"} <= files
    state = json.loads((tmp_path / "ckpt" / "learner_state.json").read_text())
    assert state == {
        "weight_version": 1,
        "step": 1,
        "optimizer_steps": 1,
        "beta": 0.0,
        "num_ranks": 1,
    }
    resumed = Learner(str(tmp_path / "ckpt"), learner_config())
    resumed.load_training_state(str(tmp_path / "ckpt"))
    assert resumed.weight_version == 1
    got, want = resumed.score(tiny_samples()), learner.score(tiny_samples())
    for got_row, want_row in zip(got, want):
        torch.testing.assert_close(torch.tensor(got_row), torch.tensor(want_row))


def test_lora_checkpoint_saves_the_adapter(tied_model, tmp_path):
    learner = Learner(tied_model, learner_config(lora=LoraConfig(enabled=True)))
    learner.save_checkpoint(str(tmp_path))
    assert (tmp_path / "adapter_model.safetensors").is_file()
    assert not (tmp_path / "model.safetensors").exists()


def test_packing_respects_the_token_budget():
    samples = tiny_samples(16, seed=1)
    for group in pack_micro_batches(samples, 24):
        lengths = [
            len(samples[i].prompt_token_ids) + len(samples[i].completion_token_ids) for i in group
        ]
        assert len(group) == 1 or len(group) * max(lengths) <= 24
    assert sorted(i for group in pack_micro_batches(samples, 24) for i in group) == list(range(16))


def test_misaligned_sampler_logprobs_are_refused(tied_model):
    learner = Learner(tied_model, learner_config())
    bad = tiny_samples(1)[0]
    bad.sampler_logprobs = [*bad.sampler_logprobs, 0.0]
    with pytest.raises(ValueError, match="aligned"):
        learner.train_step([bad])


def test_pure_bfloat16_weights_train(tied_model):
    # master_dtype="same": bf16 parameters updated in place (see learner/policy.py); the
    # default mixed-precision mode is tested in test_learner_options.py.
    config = LearnerConfig(**{**BASE_OPTIONS, "dtype": "bfloat16", "master_dtype": "same"})
    learner = Learner(tied_model, config)
    assert all(p.dtype == torch.bfloat16 for p in learner.model.parameters())
    before = snapshot(learner)
    metrics = learner.train_step(tiny_samples())
    assert all(torch.isfinite(torch.tensor(v)) for v in metrics.values())
    changed = [not torch.equal(before[n], p) for n, p in learner.model.named_parameters()]
    assert all(changed)


def test_compute_threads_follow_the_latest_request_from_the_next_micro_batch(
    tied_model, monkeypatch
):
    # A vLLM CPU engine built in this process by another test replaces torch.set_num_threads
    # with a no-op; a learner always runs in a process of its own, so put the real one back.
    monkeypatch.setattr(torch, "set_num_threads", torch._C.set_num_threads)
    before = torch.get_num_threads()
    try:
        learner = Learner(tied_model, learner_config(num_cpus=2, micro_batch_tokens=16))
        assert torch.get_num_threads() == 2
        learner.set_compute_threads(1)  # what the driver asks while a rollout shares the cores
        assert torch.get_num_threads() == 2  # only recorded: the training thread applies it
        narrowed = learner.train_step(tiny_samples())
        assert narrowed["train/compute_threads_mean"] == 1.0
        assert torch.get_num_threads() == 1
        learner.set_compute_threads(0)  # back to learner.num_cpus
        restored = learner.train_step(tiny_samples())
        assert restored["train/compute_threads_mean"] == 2.0
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_cuda_step_reports_the_peak_of_its_optimiser_step(tied_model):  # pragma: no cover
    """``train/peak_memory_gib`` is CUDA's peak from the step's start (through the export,
    which a tiny model's cannot tell apart): while AdamW steps, the weights, their gradients
    and both moments are alive at once, so the peak holds four copies of the weights."""
    learner = Learner(tied_model, learner_config(num_gpus=1, compile=False))
    assert learner.device.type == "cuda"
    metrics, update = learner.train_and_export(tiny_samples())
    weights = sum(p.numel() * p.element_size() for p in learner.model.parameters())
    assert update is not None and metrics["train/peak_memory_gib"] * (1 << 30) >= 4 * weights


def test_train_and_export_sends_the_weights_of_the_step_just_taken(tied_model):
    learner = Learner(tied_model, learner_config())
    metrics, update = learner.train_and_export(tiny_samples())
    assert update.version == learner.weight_version == 1
    assert metrics["time/weight_export_s"] >= 0.0 and "train/loss" in metrics
    sent = dict(decode_update(update))
    live = learner.model.get_input_embeddings().weight
    assert torch.equal(
        sent["model.embed_tokens.weight"], live.detach().to(sent["model.embed_tokens.weight"].dtype)
    )
