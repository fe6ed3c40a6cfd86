"""GRPO's loss as pure functions on tensors: KL estimators, TIS weights and the clipped loss.

The objective and its variants are told in ``algorithm``'s docstring. :func:`grpo_loss` takes the
tensors and one :class:`~common.config.LossConfig` (``[algorithm.loss]``), and decides from it
what the variants change: the clip range, whether the KL is a loss term, how token terms are
averaged.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from common.config import LossConfig
from common.config.algorithm import Aggregation, KLEstimator, RatioLevel


def kl_divergence(logprobs: Tensor, ref_logprobs: Tensor, estimator: KLEstimator = "k3") -> Tensor:
    """Per-token estimate of KL(pi || pi_ref) from the sampled token's logprobs (same shape).

    k1 = log r is unbiased but can be negative; k2 = (log r)^2 / 2 is low-variance but biased;
    k3 = exp(-log r) + log r - 1 is unbiased and non-negative (the GRPO paper's choice), with
    log r = logp - logp_ref.
    """
    log_ratio = logprobs - ref_logprobs
    if estimator == "k1":
        return log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio.pow(2)
    if estimator == "k3":
        return torch.exp(-log_ratio) + log_ratio - 1.0
    raise ValueError(f"unknown KL estimator {estimator!r}; use k1, k2 or k3")


def sequence_kl(
    logprobs: Tensor,  # (B, T) policy
    ref_logprobs: Tensor,  # (B, T) reference
    mask: Tensor,  # (B, T) 1 on completion tokens
    estimator: KLEstimator = "k3",
) -> Tensor:  # (B,)
    """Per-sequence KL estimate: the per-token estimator summed over each completion's tokens.

    A sum, not a mean: KL between sequence distributions is the sum of per-token KLs (chain
    rule), and that is what a per-sequence reward penalty should charge.
    """
    keep = mask.bool()
    per_token = kl_divergence(
        logprobs.masked_fill(~keep, 0.0), ref_logprobs.masked_fill(~keep, 0.0), estimator
    )
    return (per_token * keep.to(per_token.dtype)).sum(dim=1)


def tis_weights(
    old_logprobs: Tensor,  # (B, T) learner's logprobs before the update
    sampler_logprobs: Tensor,  # (B, T) the sampler's (vLLM's) logprobs of the same tokens
    mask: Tensor,  # (B, T)
    cap: float,
) -> tuple[Tensor, Tensor]:  # (B, T) weights, (B, T) bool: where the cap was hit
    """Truncated importance weights w = min(exp(old - sampler), cap), 1 off the mask, no grad.

    The tokens were drawn from the sampler's distribution, not the learner's; w corrects the
    expectation, and the cap bounds the variance a rare token with a tiny sampler probability
    would add (the truncation bias is small because such tokens are rare).
    """
    keep = mask.bool()
    log_w = (old_logprobs - sampler_logprobs).detach().masked_fill(~keep, 0.0)
    raw = torch.exp(log_w)
    capped = (raw > cap) & keep
    return raw.clamp(max=cap).masked_fill(~keep, 1.0), capped


def clip_range(config: LossConfig) -> tuple[float, float]:
    """(eps_low, eps_high) of the ratio's clip: GSPO's own with sequence-level ratios (they sit
    much closer to 1 than token ratios), else the token-level ones."""
    if config.ratio_level == "sequence":
        return config.seq_clip_eps_low, config.seq_clip_eps_high
    return config.clip_eps_low, config.clip_eps_high


def length_normaliser(config: LossConfig, lengths: Sequence[int]) -> int:
    """Dr. GRPO's constant length (``seq_mean_token_sum_norm``): ``max_len``, or the longest of
    the batch's completions (``lengths``, trained tokens). One constant for the whole batch: a
    micro-batch's own longest would weigh its tokens differently."""
    return config.max_len or max(lengths)


def grpo_loss(
    logprobs: Tensor,  # (B, T) current policy, with grad
    old_logprobs: Tensor,  # (B, T) policy that the ratio is taken against, no grad
    advantages: Tensor,  # (B,)
    mask: Tensor,  # (B, T) 1 on completion tokens, 0 on prompt and padding
    config: LossConfig,
    *,
    beta: float | None = None,
    ref_logprobs: Tensor | None = None,  # (B, T) reference policy; needed for a KL term
    entropy: Tensor | None = None,  # (B, T) per-token policy entropy, for the bonus
    sampler_logprobs: Tensor | None = None,  # (B, T) for the TIS correction
    max_len: int | None = None,
    batch_num_sequences: int | None = None,
    batch_num_tokens: float | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """The GRPO objective of ``config`` for one (micro-)batch, and its metrics (means over this
    call's completion tokens).

    ``beta`` is this step's KL weight (None: ``config.beta``), a loss term only with ``kl_in =
    "loss"``. ``max_len`` is Dr. GRPO's constant normaliser (:func:`length_normaliser`; by
    default this call's longest completion). ``batch_num_sequences`` / ``batch_num_tokens`` are
    the whole batch's totals when this is one micro-batch of several: dividing by them makes the
    micro-batch losses sum to exactly the full-batch loss, so accumulated gradients equal the
    full-batch gradient.
    """
    kl_weight = (config.beta if beta is None else beta) if config.kl_in == "loss" else 0.0
    _check_inputs(config, kl_weight, ref_logprobs, entropy, sampler_logprobs)
    logprobs, old_logprobs, ref_logprobs, entropy = _zero_masked(
        mask, logprobs, old_logprobs, ref_logprobs, entropy
    )
    mask = mask.to(logprobs.dtype)
    adv = advantages.to(logprobs.dtype).unsqueeze(1)  # (B, 1)
    level, eps = config.ratio_level, clip_range(config)
    ratio = _policy_ratio(logprobs, old_logprobs, mask, level)  # (B, T)
    per_token = _clipped_surrogate(ratio, adv, *eps)  # (B, T)
    tis = None
    if config.tis_cap > 0:
        tis = _tis_at_level(old_logprobs, sampler_logprobs, mask, config.tis_cap, level)
        per_token = per_token * tis[0]
    kl = None
    if kl_weight > 0:
        kl = kl_divergence(logprobs, ref_logprobs, config.kl_estimator)  # (B, T)
        per_token = per_token + kl_weight * kl
    if config.entropy_coef > 0:
        per_token = per_token - config.entropy_coef * entropy
    normalisers = _normalisers(mask, max_len, batch_num_sequences, batch_num_tokens)
    loss = _aggregate(per_token, mask, config.aggregation, *normalisers)
    return loss, _metrics(loss, ratio, adv, mask, kl, entropy, tis, *eps)


def _check_inputs(
    config: LossConfig,
    kl_weight: float,
    ref_logprobs: Tensor | None,
    entropy: Tensor | None,
    sampler_logprobs: Tensor | None,
) -> None:
    """Refuse a call that lacks a tensor its config needs, before any tensor work."""
    if kl_weight > 0 and ref_logprobs is None:
        raise ValueError("beta > 0 needs ref_logprobs: the KL penalty is measured against them")
    if config.entropy_coef > 0 and entropy is None:
        raise ValueError("entropy_coef > 0 needs the per-token entropy")
    if config.tis_cap > 0 and sampler_logprobs is None:
        raise ValueError("tis_cap > 0 needs sampler_logprobs: the weight is pi_old / pi_sampler")


def _policy_ratio(
    logprobs: Tensor,  # (B, T)
    old_logprobs: Tensor,  # (B, T)
    mask: Tensor,  # (B, T) float
    ratio_level: RatioLevel,
) -> Tensor:  # (B, T)
    """pi_theta / pi_old per token (GRPO), or GSPO's s_i = exp(mean_t(logp - logp_old)) on
    each token of completion i."""
    if ratio_level == "sequence":
        log_ratio = _sequence_mean(logprobs - old_logprobs, mask)  # (B, 1)
        return torch.exp(log_ratio).expand_as(mask)
    return torch.exp(logprobs - old_logprobs)


def _clipped_surrogate(
    ratio: Tensor,  # (B, T)
    adv: Tensor,  # (B, 1)
    clip_eps_low: float,
    clip_eps_high: float,
) -> Tensor:  # (B, T)
    """PPO's pessimistic objective, negated: -min(rho A, clip(rho, 1 - eps_low, 1 + eps_high) A)."""
    clipped_ratio = ratio.clamp(1.0 - clip_eps_low, 1.0 + clip_eps_high)
    return -torch.minimum(ratio * adv, clipped_ratio * adv)


def _tis_at_level(
    old_logprobs: Tensor,  # (B, T)
    sampler_logprobs: Tensor,  # (B, T)
    mask: Tensor,  # (B, T) float
    cap: float,
    ratio_level: RatioLevel,
) -> tuple[Tensor, Tensor]:  # (B, T) weights, (B, T) bool: where the cap was hit
    """``tis_weights`` per token, or with GSPO one weight per completion, like its ratio."""
    if ratio_level == "sequence":
        old_logprobs = _sequence_mean(old_logprobs, mask).expand_as(mask)
        sampler_logprobs = _sequence_mean(sampler_logprobs, mask).expand_as(mask)
    return tis_weights(old_logprobs, sampler_logprobs, mask, cap)


def _normalisers(
    mask: Tensor,  # (B, T) float
    max_len: int | None,
    batch_num_sequences: int | None,
    batch_num_tokens: float | None,
) -> tuple[int, float, float]:
    """(sequences, tokens, Dr. GRPO's length) the loss divides by: the whole batch's when given,
    else this call's own."""
    return (
        batch_num_sequences or mask.shape[0],
        batch_num_tokens or mask.sum().item(),
        float(max_len or mask.sum(dim=1).max().clamp(min=1.0).item()),
    )


def _aggregate(
    per_token: Tensor,  # (B, T)
    mask: Tensor,  # (B, T) float
    aggregation: Aggregation,
    num_sequences: int,
    num_tokens: float,
    norm_len: float,
) -> Tensor:
    if aggregation == "seq_mean_token_mean":
        return _sequence_mean(per_token, mask).sum() / num_sequences
    if aggregation == "token_mean":
        return (per_token * mask).sum() / max(num_tokens, 1.0)
    if aggregation == "seq_mean_token_sum_norm":
        return (per_token * mask).sum() / (norm_len * num_sequences)
    raise ValueError(
        f"unknown aggregation {aggregation!r}; use seq_mean_token_mean, token_mean or "
        "seq_mean_token_sum_norm"
    )


def _sequence_mean(values: Tensor, mask: Tensor) -> Tensor:  # (B, T) -> (B, 1)
    """Each completion's mean of ``values`` over its tokens."""
    keep = mask.bool()
    total = values.masked_fill(~keep, 0.0).sum(dim=1, keepdim=True)
    return total / mask.sum(dim=1, keepdim=True).clamp(min=1.0)


def _zero_masked(mask: Tensor, *tensors: Tensor | None) -> list[Tensor | None]:
    """Zero the inputs at masked positions (not just the outputs): padding may hold any value,
    and exp() of a large one would give inf * 0 = NaN in the loss or its gradient."""
    keep = mask.bool()
    return [None if t is None else t.masked_fill(~keep, 0.0) for t in tensors]


@torch.no_grad()
def _metrics(
    loss: Tensor,
    ratio: Tensor,  # (B, T)
    adv: Tensor,  # (B, 1)
    mask: Tensor,  # (B, T)
    kl: Tensor | None,  # (B, T)
    entropy: Tensor | None,  # (B, T)
    tis: tuple[Tensor, Tensor] | None,  # (B, T) weights, (B, T) where the cap was hit
    clip_eps_low: float,
    clip_eps_high: float,
) -> dict[str, float]:
    """Means over completion tokens (``loss`` is reported as is)."""
    denom = max(mask.sum().item(), 1.0)
    # Clipping only matters where it removes the gradient: the ratio left the trust region in
    # the direction the advantage pushes it.
    clipped = ((ratio < 1.0 - clip_eps_low) & (adv < 0)) | (
        (ratio > 1.0 + clip_eps_high) & (adv > 0)
    )
    metrics = {
        "loss": loss.item(),
        "kl": (kl * mask).sum().item() / denom if kl is not None else 0.0,
        "clip_frac": (clipped.to(mask.dtype) * mask).sum().item() / denom,
        "ratio_mean": (ratio * mask).sum().item() / denom,
    }
    if entropy is not None:
        metrics["entropy"] = (entropy * mask).sum().item() / denom
    if tis is not None:
        metrics["tis_weight_mean"] = (tis[0] * mask).sum().item() / denom
        metrics["tis_clip_frac"] = tis[1].sum().item() / denom
    return metrics
