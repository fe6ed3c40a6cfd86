"""learner/head_kernels.py: a compiled learner's LM-head softmax math (inductor's CPU kernels
here) gives the eager function's values and gradients, and the learner uses it."""

from __future__ import annotations

import pytest
import torch

from learner.lm_head import head_logprobs
from tests.unit.test_lm_head import _F64, _problem, _reference


def _run(fused: bool, head, hidden, targets, temperature, weights, with_entropy: bool):
    """(logp, entropy, grad hidden, grad weight, grad bias) of the function, eager or fused."""
    head.zero_grad(set_to_none=True)
    hidden = hidden.clone().requires_grad_()
    logp, entropy = head_logprobs(head, hidden, targets, temperature, 8, with_entropy, fused)
    loss = (weights[0] * logp).sum()
    if with_entropy:
        loss = loss + (weights[1] * entropy).sum()
    loss.backward()
    entropy = entropy.detach() if with_entropy else None
    return logp.detach(), entropy, hidden.grad, head.weight.grad, head.bias.grad


@pytest.mark.parametrize(("per_token", "with_entropy"), [(True, True), (False, False)])
def test_fused_kernels_match_the_function_in_float64(per_token, with_entropy):
    """Measured: largest |difference| 1.2e-14 over the four per_token x entropy cases (values
    and gradients of size ~1-10); two of them here, each compiles its own kernels."""
    problem = _problem(seed=3, dtype=torch.float64, bias=True, per_token=per_token)
    got = _run(True, *problem, with_entropy)
    want = _run(False, *problem, with_entropy)
    for name, g, w in zip(("logp", "entropy", "hidden", "weight", "bias"), got, want):
        if w is None:
            assert g is None, name
            continue
        torch.testing.assert_close(g, w, **_F64, msg=name)


def test_fused_kernels_with_only_the_entropy_in_the_loss_and_without_grad():
    """The logprobs' gradient None (only the entropy in the loss), and the reference's pass
    (no autograd): as full float64 logits."""
    head, hidden, targets, temperature, weights = _problem(3, torch.float64, True, True)
    x = hidden.clone().requires_grad_()
    _, entropy = head_logprobs(head, x, targets, temperature, 8, True, fused=True)
    (weights[1] * entropy).sum().backward()
    y = hidden.clone().requires_grad_()
    (weights[1] * _reference(head, y, targets, temperature)[1]).sum().backward()
    torch.testing.assert_close(x.grad, y.grad, **_F64)
    with torch.no_grad():
        got = head_logprobs(head, hidden, targets, temperature, 5, True, fused=True)
        want = _reference(head, hidden, targets, temperature)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, **_F64)


# Measured over seeds 0..99 under CPU bf16 autocast with float32 weights, the largest
# |fused - eager| of each output and gradient over the largest |value|: without the entropy
# 4.0e-7 (median 6e-8), with it 5.4e-4 (median 1.1e-7; two seeds above 4e-6). Both round the
# logits' gradient to bf16 once; where the float32 sums before it differ in their last bits a
# value on a bf16 rounding boundary moves by one bf16 step, 2^-8 of it: the bound.
_BF16_STEP = 2.0**-8


@pytest.mark.parametrize("with_entropy", [False, True])
def test_fused_kernels_match_the_function_under_bf16_autocast(with_entropy):
    for seed in range(5):
        problem = _problem(seed, torch.float32, True, True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got = _run(True, *problem, with_entropy)
            want = _run(False, *problem, with_entropy)
        for g, w in zip(got, want):
            if w is not None:
                assert float((g - w).abs().max() / w.abs().max()) <= _BF16_STEP
