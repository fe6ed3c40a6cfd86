"""learner.share_prompts: each distinct prompt of a micro-batch runs once and its completions
attend to its keys and values; the logprobs, the gradient and the update do not move."""

from __future__ import annotations

import pytest
import torch

from bench.learner.perturb import PerturbableLearner
from common.config import LoraConfig, LossConfig
from learner.batching import SharedPrompts, collate, pack_micro_batches, sample_length
from learner.flops import step_flops
from learner.learner import Learner
from learner.logprobs import completion_logprobs
from tests.unit.learner.helpers import VOCAB, grouped_samples, learner_config


@pytest.mark.parametrize("lora", [False, True])
def test_shared_prompts_give_the_same_logprobs_and_entropy(tied_model, lora):
    learner = PerturbableLearner(tied_model, learner_config(lora=LoraConfig(enabled=lora)))
    learner.perturb_weights_(0.05, seed=2)
    samples = grouped_samples()
    batch = collate(samples, list(range(len(samples))), temperature=0.7, share_prompts=True)
    assert batch.prompts is not None and batch.prompts.saves
    assert batch.prompts.first.tolist() == [0, 4, 8, 12]
    args = (learner.model, batch.input_ids, batch.attention_mask, batch.completion_mask)
    args += (batch.temperatures,)
    with torch.no_grad():
        shared = completion_logprobs(*args, return_entropy=True, prompts=batch.prompts)
        whole = completion_logprobs(*args, return_entropy=True)
    # fp32 on both paths; the cached keys are the same numbers, only the attention kernel's
    # summation differs: measured max difference 1e-6 (logprobs about -5).
    for got, want in zip(shared, whole, strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
        assert (got[batch.completion_mask == 0] == 0).all()


@pytest.mark.parametrize("beta, chunk", [(0.0, 1024), (0.05, 1024), (0.05, 0)])
def test_shared_prompts_give_the_same_gradient(tied_model, beta, chunk):
    samples = grouped_samples()
    grads, metrics = [], []
    for share in (False, True):  # chunk 0: the shared path's LM head in one piece
        config = learner_config(share_prompts=share, logprob_chunk_tokens=chunk if share else 1024)
        learner = PerturbableLearner(tied_model, config, loss=LossConfig(beta=beta))
        learner.perturb_weights_(0.02, seed=1)  # so the reference differs from the policy
        metrics.append(learner.accumulate_gradients(samples))
        grads.append({n: p.grad.clone() for n, p in learner.model.named_parameters()})
    # Measured: largest relative gradient difference 1.2e-6 (fp32 sums in another order).
    for key in ("train/loss", "train/entropy", "train/logprob_diff_mean", "train/kl"):
        assert metrics[1].get(key) == pytest.approx(metrics[0].get(key), rel=1e-5, abs=1e-7)
    for name, grad in grads[0].items():
        torch.testing.assert_close(grads[1][name], grad, atol=1e-6, rtol=1e-4, msg=name)


def test_shared_packing_keeps_a_prompts_rows_together_within_the_budget():
    samples = grouped_samples(groups=6, group_size=5, seed=3)
    budget = 40
    micro_batches = pack_micro_batches(samples, budget, share_prompts=True)
    assert sorted(i for m in micro_batches for i in m) == list(range(len(samples)))
    for m in micro_batches:
        rows = [samples[i] for i in m]
        prompts = {tuple(s.prompt_token_ids) for s in rows}
        longest_prompt = max(len(s.prompt_token_ids) for s in rows)
        longest_completion = max(len(s.completion_token_ids) for s in rows)
        cost = len(prompts) * longest_prompt + len(rows) * longest_completion
        assert cost <= budget or len(rows) == 1
        # a prompt's rows are adjacent: no other prompt in between
        keys = [tuple(s.prompt_token_ids) for s in rows]
        for key in prompts:
            places = [j for j, k in enumerate(keys) if k == key]
            assert places == list(range(places[0], places[-1] + 1))
    # a prompt's rows are split only where a micro-batch ends: at most one split per boundary
    homes = {}
    for number, m in enumerate(micro_batches):
        for i in m:
            homes.setdefault(tuple(samples[i].prompt_token_ids), set()).add(number)
    assert sum(len(h) - 1 for h in homes.values()) <= len(micro_batches) - 1


def test_sliding_window_models_run_every_row_whole(tmp_path):
    """A window counts cache positions, padding included: such models take the whole rows."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=32, pad_token_id=0,
        use_sliding_window=True, sliding_window=4, max_window_layers=0,
    )  # fmt: skip
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(tmp_path)
    learner = Learner(str(tmp_path), learner_config())
    assert not learner.share_prompts
    samples = grouped_samples()
    batch = collate(samples, list(range(len(samples))), share_prompts=True)
    args = (learner.model, batch.input_ids, batch.attention_mask, batch.completion_mask)
    with torch.no_grad():
        given = completion_logprobs(*args, prompts=batch.prompts)
        whole = completion_logprobs(*args)
    assert torch.equal(given, whole)


def test_rows_with_distinct_prompts_share_nothing():
    samples = grouped_samples(groups=3, group_size=1)
    prompts = SharedPrompts.of(samples, "cpu")
    assert not prompts.saves
    assert prompts.index.tolist() == [0, 1, 2]


def test_gradient_checkpointing_and_compile_turn_sharing_off(tied_model):
    assert Learner(tied_model, learner_config()).share_prompts
    assert not Learner(tied_model, learner_config(compile=True)).share_prompts
    learner = Learner(tied_model, learner_config(gradient_checkpointing=True))
    assert not learner.share_prompts
    # Called anyway, the shared forward refuses a model whose layers drop the cache.
    samples = grouped_samples()
    batch = collate(samples, list(range(len(samples))), share_prompts=True)
    learner.model.train()
    with pytest.raises(RuntimeError, match="KV cache"):
        completion_logprobs(
            learner.model,
            batch.input_ids,
            batch.attention_mask,
            batch.completion_mask,
            prompts=batch.prompts,
        )


def test_flops_count_each_prompt_once():
    # 10 matmul parameters, 2 layers, attention width 4; a 3-token prompt with 2 completions
    # of 2 and 1 tokens: tokens 3 + 2 + 1 = 6; attention squares 3^2 + (5^2 - 3^2) + (4^2 - 3^2)
    assert step_flops(10, 2, 4, [3, (3, 2), (3, 1)]) == 6 * 10 * 6 + 3 * (2 * 2 * 4 * 32)
    # the same rows each with its own copy of the prompt
    assert step_flops(10, 2, 4, [5, 4]) == 6 * 10 * 9 + 3 * (2 * 2 * 4 * 41)


def test_model_flops_follow_the_sharing(tied_model):
    samples = grouped_samples()
    shared = Learner(tied_model, learner_config())
    whole = Learner(tied_model, learner_config(share_prompts=False))
    spans = [len(samples[i].prompt_token_ids) for i in (0, 4, 8, 12)]  # each prompt once
    spans += [(len(s.prompt_token_ids), len(s.completion_token_ids)) for s in samples]
    assert shared.model_flops(samples) == step_flops(*shared._flop_shape, spans)
    lengths = [sample_length(s) for s in samples]
    assert whole.model_flops(samples) == step_flops(*whole._flop_shape, lengths)
    assert shared.model_flops(samples) < whole.model_flops(samples)
