"""Per-token logprobs of completions under a causal LM, without materialising full logits.

A (B, T, V) float32 logits tensor is the largest activation in GRPO training, and only the
logprob of the sampled token at each completion position is needed. So we run the backbone for
hidden states, keep those of positions that predict a completion token, and apply the LM head
plus log-softmax chunk by chunk, recomputing each chunk's (chunk, V) logits in backward. A plain
``nn.Linear`` head runs as one autograd function that writes the logits' gradient in place
(lm_head.py); any other head (peft's wrappers, FSDP's sharded root) keeps each chunk
checkpointed through its module.

Layout: right padding, so the default position ids are correct for every real token and, the
model being causal, trailing pads cannot influence them.

Temperature: logits are divided by the sampling temperature, which matches vLLM's
``logprobs_mode="processed_logprobs"`` (the distribution the tokens were actually drawn from).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from learner.batching import SharedPrompts
from learner.lm_head import head_is_plain, head_logprobs, softmax_dtype
from learner.policy import base_model_of

# Architectures whose causal-LM head is exactly ``lm_head(backbone(x))``: no logit soft-capping
# or scaling in between (Gemma 2, Cohere and others add one; they take the full-logits path).
_PLAIN_HEAD_MODEL_TYPES = frozenset(
    {"llama", "mistral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "starcoder2", "phi3"}
)


def _split_backbone(model: nn.Module) -> tuple[nn.Module, nn.Module] | None:
    """(backbone, lm_head) of a plain causal LM, unwrapping peft; None when not known to be safe."""
    base = base_model_of(model)
    config = getattr(base, "config", None)
    if getattr(config, "model_type", None) not in _PLAIN_HEAD_MODEL_TYPES:
        return None
    backbone = getattr(base, getattr(base, "base_model_prefix", "model"), None)
    head = base.get_output_embeddings() if hasattr(base, "get_output_embeddings") else None
    if backbone is None or head is None:
        return None
    return backbone, head


def can_share_prompts(model: nn.Module) -> bool:
    """Whether the shared-prompt forward computes what the whole-row one does for ``model``: a
    plain head (``_split_backbone``) and no sliding-window attention. A window is measured in
    cache positions, and the cache holds a short prompt's padding, so windowed layers would
    see a different context (and windowed caches keep only the window's last keys)."""
    parts = _split_backbone(model)
    if parts is None:
        return False
    config = parts[0].config
    types = getattr(config, "layer_types", None)
    if types is not None:
        return "sliding_attention" not in types
    return getattr(config, "sliding_window", None) is None


def _token_logprobs_and_entropy(
    head: nn.Module,
    hidden: Tensor,
    targets: Tensor,
    temperature: float | Tensor,  # a number, or (n,) one per token
    with_entropy: bool,
    entropy_grad: bool = True,
) -> tuple[Tensor, Tensor | None]:
    if isinstance(temperature, Tensor):
        temperature = temperature.unsqueeze(-1)  # (n, 1)
    logits = head(hidden)
    logits = logits.to(softmax_dtype(logits.dtype)) / temperature  # (n, V)
    logp = torch.log_softmax(logits, dim=-1)  # (n, V)
    token_logp = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (n,)
    if not with_entropy:
        return token_logp, None
    # A metric only: no graph, so a checkpointed chunk's recompute keeps nothing for it
    source = logp if entropy_grad else logp.detach()
    return token_logp, -(source.exp() * source).sum(dim=-1)  # (n,)


def completion_logprobs(
    model: nn.Module,
    input_ids: Tensor,  # (B, T) right-padded prompt + completion
    attention_mask: Tensor,  # (B, T) 1 on real tokens
    completion_mask: Tensor,  # (B, T) 1 on completion tokens
    temperature: float | Tensor = 1.0,
    chunk_tokens: int = 1024,
    return_entropy: bool = False,
    prompts: SharedPrompts | None = None,
    entropy_grad: bool = True,
    fused_head: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Logprob of each completion token given everything before it; 0 elsewhere (and at
    position 0, which nothing predicts). (B, T).

    ``temperature`` divides the logits: one number, or (B,), one per row. With
    ``return_entropy`` also returns the entropy of the predictive distribution at each
    completion position (B, T); ``entropy_grad = False`` when the loss does not use it (a
    metric), so no graph keeps (rows, V) tensors alive for it. ``prompts``: rows that share a
    prompt run it once (:class:`SharedPrompts`), where :func:`can_share_prompts` allows.
    ``fused_head``: a plain head's softmax math as compiled kernels (head_kernels.py).
    """
    parts = _split_backbone(model)
    rows = (input_ids, attention_mask, completion_mask, temperature)
    if parts is None:
        return _full_logits_logprobs(model, *rows, return_entropy, entropy_grad)
    backbone, head = parts
    apply_head = functools.partial(
        _head_in_chunks,
        head,
        chunk_tokens=chunk_tokens,
        return_entropy=return_entropy,
        plain_head=head_is_plain(model, head),
        entropy_grad=entropy_grad,
        fused=fused_head,
    )
    if prompts is not None and can_share_prompts(model):
        return _shared_prompt_logprobs(backbone, apply_head, *rows, prompts, return_entropy)
    out = backbone(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
    hidden = out[0]  # (B, T, H)
    predicts = completion_mask[:, 1:].bool()  # (B, T-1): position t predicts token t + 1
    token_logp, entropy = apply_head(
        hidden[:, :-1][predicts], input_ids[:, 1:][predicts], _per_token(temperature, predicts)
    )
    logprobs = _scatter(token_logp, predicts)
    if return_entropy:
        return logprobs, _scatter(entropy, predicts)
    return logprobs


def _per_token(temperature: float | Tensor, predicts: Tensor) -> float | Tensor:
    """A (B,) temperature as one value per selected token (N,): each token's row's."""
    if isinstance(temperature, Tensor):
        return temperature.view(-1, 1).expand_as(predicts)[predicts]
    return temperature


def _head_in_chunks(
    head: nn.Module,
    selected: Tensor,  # (N, H) hidden states that predict a completion token
    targets: Tensor,  # (N,) the tokens they predict
    temperature: float | Tensor,  # a number, or (N,)
    chunk_tokens: int,
    return_entropy: bool,
    plain_head: bool,
    entropy_grad: bool = True,
    fused: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """(N,) logprobs of ``targets`` (and entropies), the LM head applied ``chunk_tokens`` rows
    at a time: a plain head (:func:`head_is_plain`) as lm_head.py's function, any other head's
    chunks checkpointed. ``chunk_tokens`` 0: all N rows at once, kept for backward."""
    if chunk_tokens <= 0:
        args = (head, selected, targets, temperature, return_entropy, entropy_grad)
        return _token_logprobs_and_entropy(*args)
    if plain_head:  # an entropy without a gradient gets none there
        args = (head, selected, targets, temperature, chunk_tokens, return_entropy)
        return head_logprobs(*args, fused=fused)
    use_checkpoint = torch.is_grad_enabled() and selected.requires_grad
    logp_chunks, entropy_chunks = [], []
    for start in range(0, selected.shape[0], chunk_tokens):
        chunk = slice(start, start + chunk_tokens)
        scale = temperature[chunk] if isinstance(temperature, Tensor) else temperature
        args = (head, selected[chunk], targets[chunk], scale, return_entropy, entropy_grad)
        if use_checkpoint:
            logp, ent = checkpoint(_token_logprobs_and_entropy, *args, use_reentrant=False)
        else:
            logp, ent = _token_logprobs_and_entropy(*args)
        logp_chunks.append(logp)
        entropy_chunks.append(ent)
    empty = selected.new_zeros(0, dtype=torch.float32)
    token_logp = torch.cat(logp_chunks) if logp_chunks else empty
    if not return_entropy:
        return token_logp, None
    return token_logp, torch.cat(entropy_chunks) if entropy_chunks else empty


def _shared_prompt_logprobs(
    backbone: nn.Module,
    apply_head: Callable[..., tuple[Tensor, Tensor | None]],  # _head_in_chunks, options bound
    input_ids: Tensor,  # (B, T)
    attention_mask: Tensor,  # (B, T)
    completion_mask: Tensor,  # (B, T)
    temperature: float | Tensor,
    prompts: SharedPrompts,
    return_entropy: bool,
) -> Tensor | tuple[Tensor, Tensor]:
    """``completion_logprobs`` with each distinct prompt run once.

    Pass 1 runs the U distinct prompts (U, P) and keeps their keys and values; the cache rows
    are then indexed out to the B rows (a differentiable gather: backward sums each prompt's
    gradient over its rows). Pass 2 runs only the completions (B, C) at their true positions,
    attending to their prompt through the cache. Completion token 0 is predicted by the
    prompt's last hidden state, token j > 0 by pass 2's hidden state j - 1."""
    lengths, index = prompts.lengths, prompts.index  # (B,) each
    cache, last, prompt_mask = _prompt_pass(backbone, input_ids, prompts)
    completion_lengths = attention_mask.sum(dim=1) - lengths  # (B,)
    steps = torch.arange(int(completion_lengths.max()), device=input_ids.device)  # C
    source = (lengths[:, None] + steps).clamp(max=input_ids.shape[1] - 1)  # (B, C) in (B, T)
    real = steps < completion_lengths[:, None]  # (B, C)
    tokens = torch.where(real, input_ids.gather(1, source), 0)  # (B, C)
    second = backbone(
        input_ids=tokens,
        attention_mask=torch.cat([prompt_mask[index], real.long()], dim=1),
        position_ids=lengths[:, None] + steps,
        past_key_values=cache,
        use_cache=True,
    )
    hidden = torch.cat([last.unsqueeze(1), second[0][:, :-1]], dim=1)  # (B, C, H)
    predicts = completion_mask.gather(1, source).bool() & real  # (B, C)
    token_logp, entropy = apply_head(
        hidden[predicts], tokens[predicts], _per_token(temperature, predicts)
    )

    def place(values: Tensor) -> Tensor:  # (N,) at the predicted (B, C) -> (B, T)
        grid = values.new_zeros(predicts.shape).masked_scatter(predicts, values)
        return grid.new_zeros(input_ids.shape).scatter_add(1, source, grid)

    if return_entropy:
        return place(token_logp), place(entropy)
    return place(token_logp)


def _prompt_pass(
    backbone: nn.Module, input_ids: Tensor, prompts: SharedPrompts
) -> tuple[Any, Tensor, Tensor]:
    """Pass 1 of the shared-prompt forward: the U distinct prompts run once. Returns their KV
    cache (the model's ``Cache``) indexed out to the B rows, each row's prompt's last hidden
    state (B, H), which predicts its completion token 0, and the distinct prompts' attention
    mask (U, P)."""
    lengths = prompts.lengths  # (B,)
    width = int(lengths.max())  # P
    own_length = lengths[prompts.first]  # (U,)
    columns = torch.arange(width, device=input_ids.device)
    prompt_mask = (columns < own_length[:, None]).long()  # (U, P)
    first = backbone(
        input_ids=input_ids[prompts.first, :width], attention_mask=prompt_mask, use_cache=True
    )
    cache = first.past_key_values
    if cache is None or cache.get_seq_length() != width:  # a layer that drops the cache
        raise RuntimeError("the shared-prompt forward needs the model's KV cache")
    cache.batch_select_indices(prompts.index)  # (B, heads, P, d) per layer
    return cache, first[0][prompts.index, lengths - 1], prompt_mask


def _scatter(values: Tensor, predicts: Tensor) -> Tensor:
    """Place (N,) values at the True positions of (B, T-1), shifted right by one: (B, T)."""
    batch, width = predicts.shape
    flat_index = predicts.reshape(-1).nonzero().squeeze(-1)  # (N,)
    flat = values.new_zeros(batch * width).index_put((flat_index,), values)  # (B*(T-1),)
    return torch.cat([values.new_zeros(batch, 1), flat.view(batch, width)], dim=1)  # (B, T)


def _full_logits_logprobs(
    model: nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor,
    completion_mask: Tensor,
    temperature: float | Tensor,
    return_entropy: bool,
    entropy_grad: bool = True,
) -> Tensor | tuple[Tensor, Tensor]:
    """Reference path for architectures not known to be plain: materialises (B, T, V) logits."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits
    if isinstance(temperature, Tensor):
        temperature = temperature.view(-1, 1, 1)  # (B, 1, 1)
    logp = torch.log_softmax(logits[:, :-1].float() / temperature, dim=-1)  # (B, T-1, V)
    token_logp = logp.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)  # (B, T-1)
    mask = completion_mask[:, 1:].to(token_logp.dtype)
    pad = token_logp.new_zeros(input_ids.shape[0], 1)
    logprobs = torch.cat([pad, token_logp * mask], dim=1)  # (B, T)
    if not return_entropy:
        return logprobs
    source = logp if entropy_grad else logp.detach()
    entropy = -(source.exp() * source).sum(dim=-1) * mask  # (B, T-1)
    return logprobs, torch.cat([pad, entropy], dim=1)
