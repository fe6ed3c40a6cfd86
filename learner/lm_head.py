"""The LM head and log-softmax as one autograd function that keeps no (N, V) tensor for backward.

Autograd through ``log_softmax(head(h).float() / T)`` holds several (rows, V) tensors per chunk
even when the chunk is checkpointed (docs/benchmarks.md, "LM head"). :class:`HeadLogprobs` saves
only its inputs and the (N,) entropies; backward recomputes each chunk's logits and writes the
gradient in place, with z = (h W^T + b) / T, p = softmax(z) and the upstream gradients g
(logprob) and e (entropy):

    d logp_y / dz = onehot(y) - p
    dH / dz       = -p * (log p + H)          (H = -sum p log p)
    g_z           = g * onehot(y) - p * (g + e * (log p + H))

then grad_h = (g_z / T) W, grad_W = (g_z / T)^T h, grad_b = sum_rows (g_z / T). One (chunk, V)
float32 buffer is alive, beside blocks a fraction of it. Precision follows the module path it
replaces: the head's matmuls under the caller's autocast, the softmax math in float32; but the
weight's gradient is summed over the chunks in the weight's dtype, where autograd sums them at
autocast's bf16 copy of the weight. A compiled learner runs the softmax math as two compiled
kernels instead (``fused``; head_kernels.py).

Only where calling ``F.linear`` on the head's own weight is what its module would do
(:func:`head_is_plain`); elsewhere logprobs.py keeps its checkpointed module path.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor

from learner import head_kernels
from learner.head_kernels import softmax_dtype


def head_is_plain(model: nn.Module, head: nn.Module) -> bool:
    """Whether :func:`head_logprobs` computes what ``head``'s module path does: exactly
    ``nn.Linear`` (not peft's wrappers, not a class FSDP swapped in), no forward hooks, and not
    under FSDP2, whose root gathers the head's weight in its hooks (inside that forward the weight
    looks like an ordinary tensor, so the sharded decoder layers are what give FSDP away)."""
    if type(head) is not nn.Linear or head._forward_hooks or head._forward_pre_hooks:
        return False
    if isinstance(head.weight, DTensor):
        return False
    return not any(isinstance(module, FSDPModule) for module in model.modules())


def head_logprobs(
    head: nn.Linear,
    hidden: Tensor,  # (N, H)
    targets: Tensor,  # (N,)
    temperature: float | Tensor,  # a number, or (N,)
    chunk_tokens: int,
    with_entropy: bool,
    fused: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """(N,) float32 logprobs of ``targets`` under ``head(hidden) / temperature`` (and the
    entropies), ``chunk_tokens`` rows of logits at a time in forward and in backward."""
    logp, entropy = HeadLogprobs.apply(
        hidden, head.weight, head.bias, targets, temperature, chunk_tokens, with_entropy, fused
    )
    return logp, entropy if with_entropy else None


# Rows per temporary of the softmax sums and of the entropy's p, blocks of the vocabulary for
# the weight's gradient and of a chunk's rows for the matmuls: temporaries a fraction of one
# (chunk, V) buffer.
_ROW_BLOCK = 64
_VOCAB_BLOCKS = 8
_MATMUL_ROW_BLOCKS = 4


class HeadLogprobs(torch.autograd.Function):
    """See the module docstring. Outputs (logp (N,), entropy (N,), zeros without
    ``with_entropy``), float32 (float64 for float64 logits)."""

    @staticmethod
    def forward(
        ctx,
        hidden: Tensor,
        weight: Tensor,
        bias: Tensor | None,
        targets: Tensor,
        temperature: float | Tensor,
        chunk_tokens: int,
        with_entropy: bool,
        fused: bool,
    ) -> tuple[Tensor, Tensor]:
        ctx.set_materialize_grads(False)  # None for an output outside the loss: no work for it
        device = hidden.device.type
        ctx.autocast = (device, torch.is_autocast_enabled(device), torch.get_autocast_dtype(device))
        ctx.temperature = temperature if not isinstance(temperature, Tensor) else None
        ctx.chunk_tokens = chunk_tokens
        logp = hidden.new_empty(hidden.shape[0], dtype=softmax_dtype(hidden.dtype))
        entropy = torch.zeros_like(logp)
        lse = torch.empty_like(logp) if fused else None  # the fused backward's p
        for rows in _chunks(hidden.shape[0], chunk_tokens):
            args = (hidden[rows], weight, bias, targets[rows], _scale(temperature, rows))
            logp[rows], chunk_lse, chunk_entropy = _chunk_logprobs(*args, with_entropy, fused)
            if lse is not None:
                lse[rows] = chunk_lse
            if with_entropy:
                entropy[rows] = chunk_entropy
        scale = temperature if isinstance(temperature, Tensor) else None
        ctx.save_for_backward(hidden, weight, bias, targets, scale, entropy, lse)
        if not with_entropy:
            ctx.mark_non_differentiable(entropy)
        return logp, entropy

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_logp: Tensor | None, grad_entropy: Tensor | None):
        hidden, weight, bias, targets, scale, entropy, lse = ctx.saved_tensors
        temperature = scale if scale is not None else ctx.temperature
        needs_h, needs_w, needs_b = ctx.needs_input_grad[:3]
        grads: list[Tensor | None] = [None, None, None]
        device, enabled, dtype = ctx.autocast
        head_dtype = dtype if enabled else torch.result_type(hidden, weight)  # the matmul's
        with torch.autocast(device, dtype=dtype, enabled=enabled):
            for rows in _chunks(hidden.shape[0], ctx.chunk_tokens):
                g_z = _chunk_logit_grad(
                    hidden[rows],
                    weight,
                    bias,
                    targets[rows],
                    _scale(temperature, rows),
                    None if grad_logp is None else grad_logp[rows],
                    None if grad_entropy is None else grad_entropy[rows],
                    entropy[rows],
                    None if lse is None else lse[rows],
                )
                if needs_h:
                    grads[0] = _put(grads[0], hidden, rows, _hidden_grad(g_z, weight, head_dtype))
                if needs_w or needs_b:
                    grads[1:] = _add_vocab_block_grads(
                        grads[1:],
                        weight if needs_w else None,
                        bias if needs_b else None,
                        g_z,
                        hidden[rows],
                        head_dtype,
                    )
                del g_z
        return *grads, None, None, None, None, None


def _chunk_logprobs(
    hidden: Tensor,  # (rows, H)
    weight: Tensor,
    bias: Tensor | None,
    targets: Tensor,  # (rows,)
    t: float | Tensor,
    with_entropy: bool,
    fused: bool,
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """One chunk's (logp of the targets, logsumexp with the fused kernels, entropy when asked).
    No name here outlives the eager log-softmax: the next chunk's must not be allocated beside
    it."""
    if fused:
        return head_kernels.row_stats(F.linear(hidden, weight, bias), targets, t, with_entropy)
    z_logp = _log_softmax(hidden, weight, bias, t)
    logp = z_logp.gather(-1, targets[:, None]).squeeze(-1)
    return logp, None, _entropy(z_logp) if with_entropy else None


def _chunk_logit_grad(
    hidden: Tensor,  # (rows, H)
    weight: Tensor,
    bias: Tensor | None,
    targets: Tensor,  # (rows,)
    t: float | Tensor,
    grad_logp: Tensor | None,
    grad_entropy: Tensor | None,
    entropy: Tensor,  # (rows,)
    lse: Tensor | None,  # (rows,) with the fused kernels, else None
) -> Tensor:
    """One chunk's g_z / T from its recomputed logits: the fused kernel's, in the head's dtype,
    or the eager one's, float32, written over the chunk's log-softmax."""
    if lse is not None:
        logits = F.linear(hidden, weight, bias)
        return head_kernels.logit_grad(logits, targets, t, lse, entropy, grad_logp, grad_entropy)
    g_z = _logit_grad(
        _log_softmax(hidden, weight, bias, t), targets, grad_logp, grad_entropy, entropy
    )
    # Into the head's dtype block by block, as the module path's .float() hands it back,
    # rather than as a second (chunk, V) tensor.
    return g_z.div_(t)


def _chunks(count: int, chunk_tokens: int) -> list[slice]:
    return [slice(start, start + chunk_tokens) for start in range(0, count, chunk_tokens)]


def _row_blocks(count: int) -> list[slice]:
    """A chunk's rows in ``_MATMUL_ROW_BLOCKS`` blocks, for the matmuls whose output is a
    temporary (the head's output, g_z in the head's dtype): big enough to keep the matmul
    efficient, a quarter of the chunk's temporaries."""
    return _chunks(count, max(1, -(-count // _MATMUL_ROW_BLOCKS)))


def _scale(temperature: float | Tensor, rows: slice) -> float | Tensor:
    """The temperature of ``rows``: the number, or (rows, 1) to divide (rows, V) logits."""
    return temperature[rows, None] if isinstance(temperature, Tensor) else temperature


def _put(total: Tensor | None, like: Tensor, rows: slice, value: Tensor) -> Tensor:
    """``value`` written at ``rows`` of a gradient shaped and typed as ``like``, allocated on
    first use so that it is not alive during the first chunk's logits."""
    if total is None:
        total = torch.zeros_like(like)
    total[rows] = value
    return total


def _hidden_grad(g_z: Tensor, weight: Tensor, head_dtype: torch.dtype) -> Tensor:
    """g_z W, a block of rows at a time (each row's product is the whole matmul's)."""
    return torch.cat([g_z[b].to(head_dtype) @ weight for b in _row_blocks(g_z.shape[0])])


def _add_vocab_block_grads(
    totals: list[Tensor | None],
    weight: Tensor | None,
    bias: Tensor | None,
    g_z: Tensor,
    hidden: Tensor,
    head_dtype: torch.dtype,
) -> list[Tensor | None]:
    """[grad W + g_z^T hidden, grad b + sum_rows g_z] (None for a frozen one), a block of the
    vocabulary at a time: each product comes in the head's dtype (bf16 under autocast) and is
    summed in the parameter's, and a block of it is alive rather than a second (V, H)."""
    like = weight if weight is not None else bias
    grad_w, grad_b = totals
    if weight is not None and grad_w is None:
        grad_w = torch.zeros_like(weight)
    if bias is not None and grad_b is None:
        grad_b = torch.zeros_like(bias)
    step = -(-like.shape[0] // _VOCAB_BLOCKS)
    for start in range(0, like.shape[0], step):
        block = slice(start, start + step)
        g_block = g_z[:, block].to(head_dtype)
        if grad_w is not None:
            grad_w[block] += g_block.t() @ hidden
        if grad_b is not None:
            grad_b[block] += g_block.sum(dim=0)
    return [grad_w, grad_b]


def _log_softmax(hidden: Tensor, weight: Tensor, bias: Tensor | None, t: float | Tensor) -> Tensor:
    """(rows, V) log-softmax of the logits / t, in one float32 buffer: the head's output
    (autocast dtype) comes a block of rows at a time, and the softmax is computed in place as
    ``torch.log_softmax`` does, (z - max) - log(sum(exp(z - max)))."""
    blocks = _row_blocks(hidden.shape[0])
    first = F.linear(hidden[blocks[0]], weight, bias)
    z = first.new_empty(hidden.shape[0], first.shape[1], dtype=softmax_dtype(first.dtype))
    z[blocks[0]] = first
    del first
    for b in blocks[1:]:
        z[b] = F.linear(hidden[b], weight, bias)
    z = z.div_(t)
    z.sub_(z.amax(dim=-1, keepdim=True))
    sums = torch.cat([z[b].exp().sum(dim=-1) for b in _chunks(z.shape[0], _ROW_BLOCK)])
    return z.sub_(sums.log_()[:, None])


def _entropy(logp: Tensor) -> Tensor:
    """(rows,) -sum p log p, a block of rows' p at a time."""
    blocks = _chunks(logp.shape[0], _ROW_BLOCK)
    return torch.cat([-(logp[b].exp() * logp[b]).sum(dim=-1) for b in blocks])


def _logit_grad(
    logp: Tensor,  # (rows, V), overwritten
    targets: Tensor,  # (rows,)
    grad_logp: Tensor | None,  # (rows,); None: the logprobs are outside the loss
    grad_entropy: Tensor | None,  # (rows,); None: the entropies are outside the loss
    entropy: Tensor,  # (rows,)
) -> Tensor:
    """d(grad_logp . logp_y + grad_entropy . H)/dz, written over ``logp``:
    g * onehot(y) - p * (g + e * (log p + H)), a block of rows' p at a time."""
    g = torch.zeros_like(entropy) if grad_logp is None else grad_logp
    g = g[:, None].to(logp.dtype)
    if grad_entropy is None:  # p in place of log p
        logp.exp_().mul_(g).neg_()
    else:
        e, h = grad_entropy[:, None], entropy[:, None]
        for b in _chunks(logp.shape[0], _ROW_BLOCK):
            p = logp[b].exp()
            logp[b].add_(h[b]).mul_(e[b]).add_(g[b]).mul_(p).neg_()
    return logp.scatter_add_(-1, targets[:, None], g)
