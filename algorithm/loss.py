"""GRPO's loss as pure functions on tensors: KL estimators, TIS weights and the clipped loss.

The advantages it consumes are computed on the driver's side (``algorithm.advantage``: group
normalisation, the Kalman baseline, dynamic sampling, KL-in-reward shaping).

The algorithm (Shao et al. 2024, "DeepSeekMath", section 4.1):

1. For each prompt q sample a group of G completions o_1..o_G from the sampler policy and score
   them: rewards r_1..r_G.
2. Advantage of completion i, shared by all its tokens: A_i = (r_i - mean(r)) / (std(r) + eps).
   No value network: the group mean is the baseline.
3. Per completion token t, with ratio rho = pi_theta(o_t | q, o_<t) / pi_old(o_t | q, o_<t):

       l_t = -min(rho * A_i, clip(rho, 1 - eps_low, 1 + eps_high) * A_i) + beta * KL_t

   where KL_t estimates KL(pi_theta || pi_ref) per token with Schulman's k3 estimator
   exp(ref - logp) - (ref - logp) - 1 (unbiased, always >= 0).
4. Loss = mean over completions of the mean over that completion's tokens; one optimiser step.

Where this departs from the paper, and why:

- Group statistics (population std, zero advantage for uniform groups): see
  ``algorithm.advantage.group``.
- Options from later work: asymmetric clipping (DAPO "clip-higher", eps_high > eps_low),
  token-level aggregation (DAPO), and Dr. GRPO's unscaled advantages plus a constant
  length normaliser, which remove GRPO's bias towards long wrong answers and short right ones.
  The defaults reproduce the paper.
- mu inner epochs (PPO-style reuse of one rollout batch, ``ppo_epochs``): pi_old is the
  learner's own logprob of the batch before the first update (with mu = 1 and one mini-batch
  that is pi_theta detached, so rho = 1 and the clip never fires). The sampler's logprobs are
  not used as pi_old (vLLM's numerics, and possibly its weights, differ from the learner's);
  instead the mismatch is corrected with truncated importance sampling (TIS, Yao et al. 2025,
  "Your efficient RL framework secretly brings you off-policy RL training"): every token's
  policy-gradient term is multiplied by w = min(pi_old / pi_sampler, C), detached.
- KL either in the loss (above) or in the reward (InstructGPT style): r_i - beta * sum_t KL_t
  before the advantages are normalised (``algorithm.advantage.kl_penalised_rewards``); then the
  loss has no KL.
- DGRO-style decoupled scaling: ``advantage.reward_scale`` multiplies the advantages
  independently of beta, so the strength of the reward signal and of the KL pull are tuned
  separately.
- Optional entropy bonus (off by default), subtracted per token.
- Sequence-level ratios (GSPO, Zheng et al. 2025, "Group Sequence Policy Optimization"),
  ``ratio_level = "sequence"``: one ratio per completion, the geometric mean of its token
  ratios s_i = exp(mean_t(logp - logp_old)), clipped per completion with GSPO's own (much
  narrower) epsilons: l_i = -min(s_i A_i, clip(s_i) A_i), averaged over completions. Its
  gradient is s_i A_i times the mean over the completion's tokens of grad log pi, so every
  token of a completion is weighted alike, and one extreme token ratio cannot dominate. With
  TIS the correction is per completion too: min(exp(mean_t(old - sampler)), cap).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

KLEstimator = Literal["k1", "k2", "k3"]
RatioLevel = Literal["token", "sequence"]
Aggregation = Literal["seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm"]


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


def grpo_loss(
    logprobs: Tensor,  # (B, T) current policy, with grad
    old_logprobs: Tensor,  # (B, T) policy that the ratio is taken against, no grad
    advantages: Tensor,  # (B,)
    mask: Tensor,  # (B, T) 1 on completion tokens, 0 on prompt and padding
    ref_logprobs: Tensor | None = None,  # (B, T) reference policy; needed when beta > 0
    beta: float = 0.0,
    clip_eps_low: float = 0.2,
    clip_eps_high: float = 0.2,
    kl_estimator: KLEstimator = "k3",
    aggregation: Aggregation = "seq_mean_token_mean",
    *,
    entropy: Tensor | None = None,  # (B, T) per-token policy entropy, for the bonus
    entropy_coef: float = 0.0,
    max_len: int | None = None,
    batch_num_sequences: int | None = None,
    batch_num_tokens: float | None = None,
    sampler_logprobs: Tensor | None = None,  # (B, T) for the TIS correction
    tis_cap: float = 0.0,
    ratio_level: RatioLevel = "token",
) -> tuple[Tensor, dict[str, float]]:
    """The GRPO objective for one (micro-)batch and its metrics.

    ``max_len`` is the Dr. GRPO constant normaliser (the generation budget); it defaults to the
    longest completion in this call, so pass it explicitly when splitting into micro-batches.
    ``batch_num_sequences`` / ``batch_num_tokens`` are the whole batch's totals when this is one
    micro-batch of several: dividing by them instead of the micro-batch's own counts makes the
    micro-batch losses sum to exactly the full-batch loss, so accumulated gradients equal the
    full-batch gradient. ``tis_cap`` > 0 multiplies each token's policy-gradient term by the
    detached truncated importance weight ``tis_weights(old, sampler, cap)``; 0 disables it.
    ``ratio_level = "sequence"`` is GSPO (module docstring; ``seq_mean_token_mean`` only).
    Metrics are means over this call's completion tokens.
    """
    _check_options(ratio_level, aggregation, beta, ref_logprobs, entropy_coef, entropy)
    if tis_cap > 0 and sampler_logprobs is None:
        raise ValueError("tis_cap > 0 needs sampler_logprobs: the weight is pi_old / pi_sampler")
    logprobs, old_logprobs, ref_logprobs, entropy = _zero_masked(
        mask, logprobs, old_logprobs, ref_logprobs, entropy
    )
    mask = mask.to(logprobs.dtype)
    adv = advantages.to(logprobs.dtype).unsqueeze(1)  # (B, 1)
    ratio = _policy_ratio(logprobs, old_logprobs, mask, ratio_level)  # (B, T)
    per_token = _clipped_surrogate(ratio, adv, clip_eps_low, clip_eps_high)  # (B, T)
    tis = None
    if tis_cap > 0:
        tis = _tis_at_level(old_logprobs, sampler_logprobs, mask, tis_cap, ratio_level)
        per_token = per_token * tis[0]
    kl = None
    if beta > 0:
        kl = kl_divergence(logprobs, ref_logprobs, kl_estimator)  # (B, T)
        per_token = per_token + beta * kl
    if entropy_coef > 0:
        per_token = per_token - entropy_coef * entropy
    normalisers = _normalisers(mask, max_len, batch_num_sequences, batch_num_tokens)
    loss = _aggregate(per_token, mask, aggregation, *normalisers)
    metrics = _metrics(loss, ratio, adv, mask, kl, entropy, clip_eps_low, clip_eps_high)
    if tis is not None:
        metrics.update(_tis_metrics(*tis, mask))
    return loss, metrics


def _check_options(
    ratio_level: RatioLevel,
    aggregation: Aggregation,
    beta: float,
    ref_logprobs: Tensor | None,
    entropy_coef: float,
    entropy: Tensor | None,
) -> None:
    """Reject combinations the loss cannot compute, before any tensor work."""
    if ratio_level == "sequence" and aggregation != "seq_mean_token_mean":
        raise ValueError("ratio_level = 'sequence' needs aggregation = 'seq_mean_token_mean'")
    if beta > 0 and ref_logprobs is None:
        raise ValueError("beta > 0 needs ref_logprobs: the KL penalty is measured against them")
    if entropy_coef > 0 and entropy is None:
        raise ValueError("entropy_coef > 0 needs the per-token entropy")


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
    return metrics


def _tis_metrics(weights: Tensor, capped: Tensor, mask: Tensor) -> dict[str, float]:
    """The TIS weights' mean and how often the cap was hit, over completion tokens."""
    denom = max(mask.sum().item(), 1.0)
    return {
        "tis_weight_mean": (weights * mask).sum().item() / denom,
        "tis_clip_frac": capped.sum().item() / denom,
    }
