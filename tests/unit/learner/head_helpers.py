"""What the LM-head tests share (``learner/lm_head.py``, ``learner/head_kernels.py``): a random
head problem, its full-logits reference and the float64 tolerance, and a spy on the compiled
kernels."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from learner import head_kernels

# float64 end to end: measured max |difference| over test_lm_head.py's 16 cases, function vs
# reference and vs the checkpoint path, values and gradients: 7e-15 (gradients of size ~1-10).
F64 = {"atol": 1e-12, "rtol": 0}


def head_reference(
    head: nn.Linear, hidden: Tensor, targets: Tensor, temperature: float | Tensor
) -> tuple[Tensor, Tensor]:
    """Full (N, V) logits through autograd, in the head's dtype: (logp, entropy)."""
    t = temperature[:, None] if isinstance(temperature, Tensor) else temperature
    logp = torch.log_softmax(head(hidden) / t, dim=-1)
    return logp.gather(-1, targets[:, None]).squeeze(-1), -(logp.exp() * logp).sum(dim=-1)


def head_problem(seed: int, dtype: torch.dtype, bias: bool, per_token: bool):
    """A random head, hidden rows, targets and temperature; N is no multiple of the chunk."""
    gen = torch.Generator().manual_seed(seed)
    rows, width, vocab = 37, 24, 53
    head = nn.Linear(width, vocab, bias=bias).to(dtype)
    with torch.no_grad():
        head.weight.copy_(torch.randn(vocab, width, generator=gen, dtype=dtype))
        if bias:
            head.bias.copy_(torch.randn(vocab, generator=gen, dtype=dtype))
    hidden = torch.randn(rows, width, generator=gen, dtype=dtype)
    targets = torch.randint(0, vocab, (rows,), generator=gen)
    temperature = 0.7
    if per_token:
        temperature = 0.4 + torch.rand(rows, generator=gen, dtype=dtype)
    # Upstream gradients of both outputs, as the GRPO loss with an entropy bonus gives them.
    weights = torch.randn(2, rows, generator=gen, dtype=dtype)
    return head, hidden, targets, temperature, weights


def spy_kernels(monkeypatch) -> list[str]:
    """The names of the compiled kernels as they run, in order: a fused path that quietly ran
    eager would pass every comparison with the eager function."""
    calls: list[str] = []
    for name in ("row_stats", "logit_grad"):
        kernel = getattr(head_kernels, name)

        def spied(*args, _kernel=kernel, _name=name):
            calls.append(_name)
            return _kernel(*args)

        monkeypatch.setattr(head_kernels, name, spied)
    return calls
