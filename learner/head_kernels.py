"""The LM head's softmax math as two compiled kernels, for a compiled learner (``learner.compile``).

:class:`lm_head.HeadLogprobs` computes a chunk's log-softmax eagerly in one float32 (rows, V)
buffer, about ten memory-bound passes over it in forward and as many in backward. Here each
formula is one function for torch.compile, which fuses it into reductions that read the logits in
their own dtype and keep float32 only in registers (docs/benchmarks.md, "The LM head's softmax
math compiled"). Forward, per row, with z = logits / T, m = max z, s = sum exp(z - m):

    lse = m + log s,    logp_y = z_y - lse,    H = log s - sum exp(z - m) (z - m) / s

Backward, with p = exp(z - lse) from the saved lse and H, as lm_head.py derives it:

    g_z = (g onehot(y) - p (g + e (z - lse + H))) / T

written once, in the logits' dtype.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch import Tensor


def softmax_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype of the log-softmax math: float32, or float64 for float64 logits (tests)."""
    return torch.promote_types(dtype, torch.float32)


def _row_stats(
    logits: Tensor,  # (rows, V)
    targets: Tensor,  # (rows,)
    temperature: Tensor,  # (rows, 1)
    with_entropy: bool,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """(logp of the targets, logsumexp, entropy or None), each (rows,) in the softmax dtype."""
    z = logits.to(softmax_dtype(logits.dtype)) / temperature
    top = z.amax(dim=-1, keepdim=True)
    shifted = z - top
    exps = shifted.exp()
    sums = exps.sum(dim=-1, keepdim=True)
    log_sums = sums.log()
    lse = (top + log_sums).squeeze(-1)
    logp = z.gather(-1, targets[:, None]).squeeze(-1) - lse
    if not with_entropy:
        return logp, lse, None
    entropy = log_sums.squeeze(-1) - (exps * shifted).sum(dim=-1) / sums.squeeze(-1)
    return logp, lse, entropy


def _logit_grad(
    logits: Tensor,  # (rows, V)
    targets: Tensor,  # (rows,)
    temperature: Tensor,  # (rows, 1)
    lse: Tensor,  # (rows,)
    entropy: Tensor,  # (rows,)
    grad_logp: Tensor,  # (rows,)
    grad_entropy: Tensor | None,  # (rows,); None: the entropies are outside the loss
) -> Tensor:
    """d(grad_logp . logp_y + grad_entropy . H)/d logits, (rows, V) in the logits' dtype."""
    z = logits.to(softmax_dtype(logits.dtype)) / temperature
    logp = z - lse[:, None]
    p = logp.exp()
    g = grad_logp.to(lse.dtype)[:, None]
    if grad_entropy is None:
        g_z = -p * g
    else:
        e = grad_entropy.to(lse.dtype)[:, None]
        g_z = -p * (g + e * (logp + entropy[:, None]))
    columns = torch.arange(logits.shape[-1], device=logits.device)
    g_z = g_z + torch.where(columns == targets[:, None], g, 0.0)
    return (g_z / temperature).to(logits.dtype)


@functools.cache
def _compiled(kernel: Callable) -> Callable:
    """``kernel`` under torch.compile, built on first use (a learner without ``learner.compile``
    never imports the compiler). The wrappers below keep the graphs under dynamo's limit of 8
    per function (a temperature and the logprobs' gradient always as tensors). Not
    ``fullgraph``, which turns that limit into an error mid-run: past it the kernel runs
    eagerly, the same math."""
    return torch.compile(kernel, dynamic=True)


def _column(temperature: float | Tensor, logits: Tensor) -> Tensor:
    """The temperature as (rows, 1): a number broadcast, or the rows' own."""
    if isinstance(temperature, Tensor):
        return temperature.reshape(-1, 1)
    dtype = softmax_dtype(logits.dtype)
    return logits.new_full((logits.shape[0], 1), temperature, dtype=dtype)


def row_stats(
    logits: Tensor, targets: Tensor, temperature: float | Tensor, with_entropy: bool
) -> tuple[Tensor, Tensor, Tensor | None]:
    """Compiled :func:`_row_stats`: (logp of the targets, logsumexp, entropy or None)."""
    t = _column(temperature, logits)
    return _compiled(_row_stats)(logits, targets, t, with_entropy)


def logit_grad(
    logits: Tensor,
    targets: Tensor,
    temperature: float | Tensor,
    lse: Tensor,
    entropy: Tensor,
    grad_logp: Tensor | None,
    grad_entropy: Tensor | None,
) -> Tensor:
    """Compiled :func:`_logit_grad`: the logits' gradient, divided by the temperature."""
    if grad_logp is None:  # the logprobs outside the loss: a zero gradient, one graph fewer
        grad_logp = torch.zeros_like(lse)
    args = (logits, targets, _column(temperature, logits), lse, entropy, grad_logp, grad_entropy)
    return _compiled(_logit_grad)(*args)
