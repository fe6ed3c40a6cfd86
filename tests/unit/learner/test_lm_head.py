"""learner/lm_head.py: the LM head + log-softmax as one autograd function gives the values and
gradients of the checkpointed module path and of full logits, and is chosen only for a plain
head."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import distribute_tensor

from bench.learner.live_bytes import LiveTensorBytes
from learner import lm_head
from learner.logprobs import _head_in_chunks, completion_logprobs
from learner.sharding import Root, call
from tests.unit.learner.head_helpers import F64, head_problem, head_reference
from tests.unit.learner.helpers import VOCAB


def _run(path: str, head, hidden, targets, temperature, weights, with_entropy: bool, chunk=8):
    """(logp, entropy, grad hidden, grad weight, grad bias) of one path."""
    head.zero_grad(set_to_none=True)
    hidden = hidden.clone().requires_grad_()
    if path == "reference":
        logp, entropy = head_reference(head, hidden, targets, temperature)
    else:
        plain = path == "function"
        logp, entropy = _head_in_chunks(
            head, hidden, targets, temperature, chunk, with_entropy, plain
        )
    loss = (weights[0] * logp).sum()
    if with_entropy:
        loss = loss + (weights[1] * entropy).sum()
    loss.backward()
    bias_grad = head.bias.grad if head.bias is not None else None
    entropy = entropy.detach() if with_entropy else None
    return logp.detach(), entropy, hidden.grad, head.weight.grad, bias_grad


@pytest.mark.parametrize("per_token", [False, True])
@pytest.mark.parametrize("with_entropy", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_function_matches_full_logits_and_the_checkpoint_path_in_float64(
    per_token, with_entropy, bias
):
    problem = head_problem(seed=3, dtype=torch.float64, bias=bias, per_token=per_token)
    got = _run("function", *problem, with_entropy)
    for other in ("reference", "checkpoint"):
        want = _run(other, *problem, with_entropy)
        for name, g, w in zip(("logp", "entropy", "hidden", "weight", "bias"), got, want):
            if w is None:
                assert g is None, name
                continue
            torch.testing.assert_close(g, w, **F64, msg=f"{name} vs {other}")


def test_only_the_entropy_in_the_loss_and_a_frozen_head():
    """The logprobs outside the loss (their gradient None) and a head without gradient."""
    head, hidden, targets, temperature, weights = head_problem(3, torch.float64, True, True)
    head.requires_grad_(False)
    grads = []
    for path in ("function", "reference"):
        x = hidden.clone().requires_grad_()
        if path == "function":
            _, entropy = _head_in_chunks(head, x, targets, temperature, 8, True, True)
        else:
            entropy = head_reference(head, x, targets, temperature)[1]
        (weights[1] * entropy).sum().backward()
        grads.append(x.grad)
    torch.testing.assert_close(*grads, **F64)
    assert head.weight.grad is None


def test_no_grad_values_match():
    head, hidden, targets, temperature, _ = head_problem(4, torch.float64, False, True)
    with torch.no_grad():
        got = _head_in_chunks(head, hidden, targets, temperature, 5, True, True)
        want = head_reference(head, hidden, targets, temperature)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, **F64)


def _bf16_differences(seed: int, with_entropy: bool) -> list[float]:
    """Max |function - checkpoint| of each output and gradient, under CPU bf16 autocast with
    float32 weights (the learner's mixed precision), each divided by the largest |value|."""
    head, hidden, targets, temperature, weights = head_problem(seed, torch.float32, True, True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = _run("function", head, hidden, targets, temperature, weights, with_entropy)
        want = _run("checkpoint", head, hidden, targets, temperature, weights, with_entropy)
    return [float((g - w).abs().max() / w.abs().max()) for g, w in zip(got, want) if w is not None]


# Measured over seeds 0..199 (the largest of `_bf16_differences(seed, e)`, e False and True):
# logprobs and entropies agree to 9e-6 of their largest value, the hidden states' gradient to
# 0.0016 (median 0): the function runs the head's bf16 matmuls a block of rows at a time, which
# may sum in another order, and a value on a bf16 rounding boundary moves by a bf16 step
# (2^-8 of it). The weight's and the bias's gradients differ by up to 0.0092 (median 0.0035),
# because autocast casts the weight to bf16 once and autograd sums the checkpoint path's
# chunks at that cast, in bf16 (five chunks: five roundings of up to 2^-9 each), while the
# function sums them in float32. Bound: about twice the largest measured.
_BF16_RELATIVE = 0.02


@pytest.mark.parametrize("with_entropy", [False, True])
def test_function_matches_the_checkpoint_path_under_bf16_autocast(with_entropy):
    for seed in range(5):
        assert max(_bf16_differences(seed, with_entropy)) <= _BF16_RELATIVE


def _model_grads(model_path: str, plain: bool, monkeypatch) -> tuple[Tensor, Tensor]:
    """(logprobs, gradient of the shared embedding / head weight) of a tiny tied Qwen2 in
    float64, through completion_logprobs with the function (``plain``) or the checkpoint."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path).to(torch.float64)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    monkeypatch.setattr("learner.logprobs.head_is_plain", lambda model, head: plain)
    gen = torch.Generator().manual_seed(0)
    input_ids = torch.randint(1, VOCAB, (3, 12), generator=gen)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[2, 9:] = 0
    completion_mask = attention_mask.clone()
    completion_mask[:, :4] = 0
    temperature = torch.tensor([1.0, 0.6, 1.3], dtype=torch.float64)
    logprobs, entropy = completion_logprobs(
        model, input_ids, attention_mask, completion_mask, temperature, 5, return_entropy=True
    )
    (logprobs.sum() + 0.1 * entropy.sum()).backward()
    return logprobs.detach(), model.lm_head.weight.grad


def test_tied_embedding_gets_the_same_gradient(tied_model, monkeypatch):
    """Qwen2.5-0.5B/1.5B tie the head to the input embedding: the head's gradient reaches the
    shared weight and adds to the embedding's, as on the checkpoint path."""
    got = _model_grads(tied_model, True, monkeypatch)
    want = _model_grads(tied_model, False, monkeypatch)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, **F64)


class _Wrapped(nn.Module):
    """A head that is not an nn.Linear (as peft's LoRA Linear or ModulesToSaveWrapper)."""

    def __init__(self) -> None:
        super().__init__()
        self.base_layer = nn.Linear(4, 8)
        self.weight = self.base_layer.weight

    def forward(self, x: Tensor) -> Tensor:
        return self.base_layer(x)


def test_the_function_is_chosen_for_a_plain_linear_only():
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 8))
    assert lm_head.head_is_plain(model, model[1])
    assert not lm_head.head_is_plain(model, _Wrapped())
    assert not lm_head.head_is_plain(model, type("Sub", (nn.Linear,), {})(4, 8))
    hooked = nn.Linear(4, 8)
    hooked.register_forward_hook(lambda module, args, out: out * 2)
    assert not lm_head.head_is_plain(model, hooked)


@pytest.fixture
def one_rank_group():
    if dist.is_initialized():
        pytest.skip("a process group already exists in this process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield init_device_mesh("cpu", (1,))
    dist.destroy_process_group()


def test_the_function_is_not_chosen_under_fsdp(one_rank_group, monkeypatch):
    """sharding.py's layout: each layer and a root around the model sharded; inside the root's
    forward the head's weight is an ordinary tensor, the sharded layers give FSDP away."""
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 8))
    fully_shard(model[0], mesh=one_rank_group)
    root = fully_shard(Root(model), mesh=one_rank_group)
    assert not lm_head.head_is_plain(model, model[1])  # the weight is a DTensor here
    seen = []
    call(root, lambda m: seen.append(lm_head.head_is_plain(m, m[1])))
    assert seen == [False]
    dtensor_head = nn.Linear(4, 8)
    dtensor_head.weight = nn.Parameter(distribute_tensor(dtensor_head.weight, one_rank_group))
    assert not lm_head.head_is_plain(nn.Sequential(), dtensor_head)


@pytest.mark.parametrize("plain", [False, True])
def test_an_entropy_kept_as_a_metric_keeps_nothing_to_the_end_of_backward(plain):
    """The step asks for the entropy as a metric when ``entropy_coef`` is 0 (entropy_grad
    False). The checkpoint path used to build its graph in each chunk's recompute, which no
    gradient ever consumed: two (rows, V) float32 tensors per token alive until backward ended,
    the peak growing with the tokens (the "unexplained" per-token vocabulary term the H200
    measurements had). Now the backward peak does not grow with the number of chunks."""
    gen = torch.Generator().manual_seed(0)
    width, vocab, chunk = 16, 4096, 32

    def backward_peak(rows: int, entropy_grad: bool) -> int:
        head = nn.Linear(width, vocab, bias=False)
        with torch.no_grad():
            head.weight.copy_(torch.randn(vocab, width, generator=gen))
        hidden = torch.randn(rows, width, generator=gen, requires_grad=True)
        targets = torch.randint(0, vocab, (rows,), generator=gen)
        logp, _ = _head_in_chunks(head, hidden, targets, 1.0, chunk, True, plain, entropy_grad)
        with LiveTensorBytes() as counter:
            counter.reset()
            logp.sum().backward()
            return counter.peak()

    few = backward_peak(2 * chunk, entropy_grad=False)
    many = backward_peak(8 * chunk, entropy_grad=False)
    rows_v = chunk * vocab * 4  # one chunk's (rows, V) float32 tensor
    # 6 more chunks may add their (rows, H) gradients, not their (rows, V) tensors
    assert many - few < rows_v
    if not plain:  # the old behaviour, to show the test can fail: each chunk's graph stays
        kept = backward_peak(8 * chunk, entropy_grad=True)
        assert kept - many > 6 * rows_v


def test_the_backward_holds_one_chunk_of_logits_at_a_time():
    """Backward recomputes chunk after chunk: a name that keeps a chunk's float32 (rows, V)
    buffer past its use makes the next chunk's allocate beside it. Measured (float32, no
    autocast; what was alive before backward not counted): 2.00 buffers' worth beyond the
    gradients (the buffer, the head's output and the exp-sums a block at a time); 3.00 with
    the buffer kept one chunk too long (a regression of 2026-11-27, found by
    bench.learner.lm_head). Bound: midway."""
    gen = torch.Generator().manual_seed(0)
    width, vocab, chunk = 16, 4096, 32
    head = nn.Linear(width, vocab, bias=False)
    hidden = torch.randn(4 * chunk, width, generator=gen, requires_grad=True)
    targets = torch.randint(0, vocab, (4 * chunk,), generator=gen)
    logp, _ = _head_in_chunks(head, hidden, targets, 1.0, chunk, True, True, entropy_grad=True)
    with LiveTensorBytes() as counter:
        before = counter.live  # whatever the process holds (earlier tests' tensors, in a suite)
        counter.reset()
        logp.sum().backward()
        peak = counter.peak() - before
    gradients = 4 * (head.weight.numel() + hidden.numel())
    assert peak - gradients < 2.5 * chunk * vocab * 4
