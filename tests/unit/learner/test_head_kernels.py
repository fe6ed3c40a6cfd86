"""learner/head_kernels.py: a compiled learner's LM-head softmax math (inductor's CPU kernels
here) gives the eager function's values and gradients, and the learner uses it."""

from __future__ import annotations

import pytest
import torch

from learner import head_kernels
from learner.lm_head import head_logprobs
from tests.unit.learner.head_helpers import F64, head_problem, head_reference, spy_kernels


def _run(fused: bool, head, hidden, targets, temperature, weights, with_entropy: bool, chunk=8):
    """(logp, entropy, grad hidden, grad weight, grad bias) of the function, eager or fused."""
    head.zero_grad(set_to_none=True)
    hidden = hidden.clone().requires_grad_()
    logp, entropy = head_logprobs(head, hidden, targets, temperature, chunk, with_entropy, fused)
    loss = (weights[0] * logp).sum()
    if with_entropy:
        loss = loss + (weights[1] * entropy).sum()
    loss.backward()
    entropy = entropy.detach() if with_entropy else None
    return logp.detach(), entropy, hidden.grad, head.weight.grad, head.bias.grad


@pytest.mark.parametrize(
    ("per_token", "with_entropy", "chunk"), [(True, True, 8), (False, False, 8), (False, True, 6)]
)
def test_fused_kernels_match_the_function_in_float64(per_token, with_entropy, chunk, monkeypatch):
    """Measured: largest |difference| 1.2e-14 over the four per_token x entropy cases (values
    and gradients of size ~1-10). Chunks of 6 leave a one-row last chunk of the 37 rows (its
    own graph: dynamic shapes specialise a size of 1)."""
    problem = head_problem(seed=3, dtype=torch.float64, bias=True, per_token=per_token)
    calls = spy_kernels(monkeypatch)
    got = _run(True, *problem, with_entropy, chunk)
    chunks = -(-37 // chunk)
    assert calls == ["row_stats"] * chunks + ["logit_grad"] * chunks
    want = _run(False, *problem, with_entropy, chunk)
    for name, g, w in zip(("logp", "entropy", "hidden", "weight", "bias"), got, want):
        if w is None:
            assert g is None, name
            continue
        torch.testing.assert_close(g, w, **F64, msg=name)


def test_fused_kernels_with_only_the_entropy_in_the_loss_and_without_grad():
    """The logprobs' gradient None (only the entropy in the loss), and the reference's pass
    (no autograd): as full float64 logits."""
    head, hidden, targets, temperature, weights = head_problem(3, torch.float64, True, True)
    x = hidden.clone().requires_grad_()
    _, entropy = head_logprobs(head, x, targets, temperature, 8, True, fused=True)
    (weights[1] * entropy).sum().backward()
    y = hidden.clone().requires_grad_()
    (weights[1] * head_reference(head, y, targets, temperature)[1]).sum().backward()
    torch.testing.assert_close(x.grad, y.grad, **F64)
    with torch.no_grad():
        got = head_logprobs(head, hidden, targets, temperature, 5, True, fused=True)
        want = head_reference(head, hidden, targets, temperature)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, **F64)


# Measured over seeds 0..99 under CPU bf16 autocast with float32 weights, the largest
# |fused - eager| of each output and gradient over the largest |value|: without the entropy
# 4.0e-7 (median 6e-8), with it 5.4e-4 (median 1.1e-7; two seeds above 4e-6). Both round the
# logits' gradient to bf16 once; where the float32 sums before it differ in their last bits a
# value on a bf16 rounding boundary moves by one bf16 step: at most 2^-7 of the largest value
# (bf16 keeps 8 significant bits), the bound; the measured worst is 2^-11.
_BF16_STEP = 2.0**-7


@pytest.mark.parametrize("with_entropy", [False, True])
def test_fused_kernels_match_the_function_under_bf16_autocast(with_entropy):
    for seed in range(5):
        problem = head_problem(seed, torch.float32, True, True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got = _run(True, *problem, with_entropy)
            want = _run(False, *problem, with_entropy)
        for g, w in zip(got, want):
            if w is not None:
                assert float((g - w).abs().max() / w.abs().max()) <= _BF16_STEP


def test_each_kernel_compiles_to_one_graph():
    """No graph break in either kernel (a break would leave the eager passes between graphs),
    for the variants a learner compiles: bf16 logits, with and without the entropy's part, a
    one-row chunk. The caches first emptied: the tests above compiled float64 and float32
    variants of the same functions, which count toward dynamo's limit."""
    torch._dynamo.reset()
    gen = torch.Generator().manual_seed(0)
    for rows in (5, 1):
        logits = torch.randn(rows, 64, generator=gen).bfloat16()
        targets = torch.randint(0, 64, (rows,), generator=gen)
        t = torch.full((rows, 1), 0.7)
        for with_entropy in (False, True):
            stats = torch.compile(head_kernels._row_stats, dynamic=True, fullgraph=True)
            _, lse, entropy = stats(logits, targets, t, with_entropy)
            grad = torch.compile(head_kernels._logit_grad, dynamic=True, fullgraph=True)
            upstream = torch.randn(rows, generator=gen) if with_entropy else None
            h = entropy if with_entropy else torch.zeros_like(lse)
            g_z = grad(logits, targets, t, lse, h, torch.randn(rows, generator=gen), upstream)
            assert g_z.dtype == torch.bfloat16 and g_z.shape == logits.shape
