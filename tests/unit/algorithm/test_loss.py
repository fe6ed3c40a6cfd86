"""The GRPO loss (``algorithm/loss.py``) against values worked out by hand (the arithmetic is in
the comments): KL estimators, the clipped surrogate, aggregations, TIS, the entropy bonus and
GSPO's sequence-level ratios. The advantages are tested beside their modules, in
algorithm/advantage/."""

from __future__ import annotations

import math

import pytest
import torch

from algorithm.loss import (
    clip_range,
    grpo_loss,
    kl_divergence,
    length_normaliser,
    sequence_kl,
    tis_weights,
)
from common.config import LossConfig


def knobs(**options) -> LossConfig:
    """``[algorithm.loss]`` with ``options``, TIS off unless asked for (it needs sampler
    logprobs, which most of these hand-worked batches do not have)."""
    return LossConfig(**{"tis_cap": 0.0, **options})


def test_kl_estimators_by_hand():
    logp, ref = torch.tensor([-1.0, -2.0]), torch.tensor([-1.5, -1.0])
    # log r = logp - ref = (0.5, -1.0)
    torch.testing.assert_close(kl_divergence(logp, ref, "k1"), torch.tensor([0.5, -1.0]))
    torch.testing.assert_close(kl_divergence(logp, ref, "k2"), torch.tensor([0.125, 0.5]))
    # k3 = exp(-log r) + log r - 1: exp(-.5) - .5 = 0.1065307, e - 2 = 0.7182818
    k3 = kl_divergence(logp, ref, "k3")
    torch.testing.assert_close(k3, torch.tensor([0.1065307, 0.7182818]))
    assert kl_divergence(ref, ref, "k3").abs().max() == 0


def _ratios_batch():
    """Row 0: A = +1, row 1: A = -1; ratios 0.5, 1.0, 1.5 in each row (old logprobs 0)."""
    logprobs = torch.log(torch.tensor([[0.5, 1.0, 1.5], [0.5, 1.0, 1.5]])).requires_grad_()
    return logprobs, torch.zeros(2, 3), torch.tensor([1.0, -1.0]), torch.ones(2, 3)


def test_clipped_surrogate_by_hand():
    logprobs, old, adv, mask = _ratios_batch()
    loss, metrics = grpo_loss(logprobs, old, adv, mask, knobs(clip_eps_low=0.2, clip_eps_high=0.2))
    # A=+1: -min(rA, clip(r)A) = -min(.5,.8), -1, -min(1.5,1.2) -> -.5, -1, -1.2; mean -0.9
    # A=-1: -min(-.5,-.8), 1, -min(-1.5,-1.2)               ->  .8,  1,  1.5; mean  1.1
    assert loss.item() == pytest.approx((-0.9 + 1.1) / 2)
    # clipped (no gradient): r=1.5 with A>0 and r=0.5 with A<0 -> 2 of 6 tokens
    assert metrics["clip_frac"] == pytest.approx(2 / 6)
    assert metrics["ratio_mean"] == pytest.approx(1.0)
    assert metrics["kl"] == 0.0
    loss.backward()
    # d/dlogp of -rA is -A r, divided by 3 tokens x 2 sequences; clipped tokens get 0
    expected = torch.tensor([[-0.5 / 6, -1 / 6, 0.0], [0.0, 1 / 6, 1.5 / 6]])
    torch.testing.assert_close(logprobs.grad, expected)


def test_asymmetric_clip_higher():
    logprobs, old, adv, mask = _ratios_batch()
    loss, _ = grpo_loss(logprobs, old, adv, mask, knobs(clip_eps_low=0.2, clip_eps_high=0.28))
    # only row 0's r=1.5 changes: clipped to 1.28 instead of 1.2
    assert loss.item() == pytest.approx(((-0.5 - 1 - 1.28) / 3 + 1.1) / 2)


def _uneven_batch():
    """Ratio 1, so per-token loss is -A: row 0 has 3 tokens (A=1), row 1 one token (A=-2)."""
    logprobs = torch.zeros(2, 4, requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [0.0, 1.0, 0.0, 0.0]])
    return logprobs, torch.zeros(2, 4), torch.tensor([1.0, -2.0]), mask


@pytest.mark.parametrize(
    ("aggregation", "expected"),
    [
        ("seq_mean_token_mean", (-1.0 + 2.0) / 2),  # per-sequence means -1 and 2
        ("token_mean", (-3.0 + 2.0) / 4),  # 4 tokens in all
        ("seq_mean_token_sum_norm", (-3.0 / 8 + 2.0 / 8) / 2),  # sums over max_len 8
    ],
)
def test_aggregations_by_hand(aggregation, expected):
    logprobs, old, adv, mask = _uneven_batch()
    loss, _ = grpo_loss(logprobs, old, adv, mask, knobs(aggregation=aggregation), max_len=8)
    assert loss.item() == pytest.approx(expected)


@pytest.mark.parametrize(
    "aggregation", ["seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm"]
)
def test_micro_batch_losses_sum_to_full_batch_loss(aggregation):
    logprobs, old, adv, mask = _uneven_batch()
    full, _ = grpo_loss(logprobs, old, adv, mask, knobs(aggregation=aggregation), max_len=8)
    parts = [
        grpo_loss(
            logprobs[i : i + 1],
            old[i : i + 1],
            adv[i : i + 1],
            mask[i : i + 1],
            knobs(aggregation=aggregation),
            max_len=8,
            batch_num_sequences=2,
            batch_num_tokens=4,
        )[0]
        for i in range(2)
    ]
    assert (parts[0] + parts[1]).item() == pytest.approx(full.item())


def test_kl_penalty_by_hand():
    logprobs = torch.tensor([[-1.0]], requires_grad=True)
    loss, metrics = grpo_loss(
        logprobs,
        logprobs.detach(),
        torch.zeros(1),
        torch.ones(1, 1),
        knobs(beta=0.5),
        ref_logprobs=torch.tensor([[-1.5]]),
    )
    # A = 0, so only beta * k3(log r = 0.5) = 0.5 * 0.1065307
    assert loss.item() == pytest.approx(0.5 * 0.1065307, rel=1e-5)
    assert metrics["kl"] == pytest.approx(0.1065307, rel=1e-5)


def test_beta_without_reference_is_refused():
    logprobs, old, adv, mask = _ratios_batch()
    with pytest.raises(ValueError, match="ref_logprobs"):
        grpo_loss(logprobs, old, adv, mask, knobs(beta=0.1))


def test_entropy_bonus_by_hand():
    logprobs, old, _, mask = _uneven_batch()
    entropy = torch.tensor([[1.0, 2.0, 3.0, 9.0], [9.0, 4.0, 9.0, 9.0]])
    loss, metrics = grpo_loss(
        logprobs, old, torch.zeros(2), mask, knobs(entropy_coef=0.1), entropy=entropy
    )
    # per-sequence mean entropies 2 and 4 -> mean 3; loss -0.1 * 3
    assert loss.item() == pytest.approx(-0.3)
    assert metrics["entropy"] == pytest.approx((1 + 2 + 3 + 4) / 4)


def test_gradient_flows_only_through_completion_tokens():
    torch.manual_seed(0)
    mask = torch.tensor([[0.0, 0.0, 1.0, 1.0, 0.0], [0.0, 1.0, 1.0, 1.0, 1.0]])
    # Garbage at masked positions, large enough that exp() overflows, must not leak or NaN.
    logprobs = torch.where(mask.bool(), -torch.rand(2, 5), torch.tensor(-200.0)).requires_grad_()
    old = logprobs.detach() + 0.1 * torch.randn(2, 5)
    ref = torch.where(mask.bool(), -torch.rand(2, 5), torch.tensor(100.0))
    entropy = torch.rand(2, 5, requires_grad=True)
    sampler = torch.where(mask.bool(), old - 0.3 * torch.rand(2, 5), torch.tensor(-500.0))
    loss, _ = grpo_loss(
        logprobs,
        old,
        torch.tensor([0.7, -1.3]),
        mask,
        knobs(beta=0.1, entropy_coef=0.01, tis_cap=2.0),
        ref_logprobs=ref,
        entropy=entropy,
        sampler_logprobs=sampler,
    )
    loss.backward()
    assert torch.isfinite(loss)
    for grad in (logprobs.grad, entropy.grad):
        assert torch.isfinite(grad).all()
        assert (grad[~mask.bool()] == 0).all()
        assert (grad[mask.bool()] != 0).all()


def test_sequence_kl_sums_tokens_by_hand():
    logp = torch.tensor([[-1.0, -2.0, 5.0], [-1.0, 0.0, 0.0]])
    ref = torch.tensor([[-1.5, -1.0, -9.0], [-1.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    # row 0: log r = (0.5, -1.0), masked third token ignored; row 1: log r = 0
    torch.testing.assert_close(sequence_kl(logp, ref, mask, "k1"), torch.tensor([-0.5, 0.0]))
    torch.testing.assert_close(sequence_kl(logp, ref, mask, "k2"), torch.tensor([0.625, 0.0]))
    k3 = sequence_kl(logp, ref, mask, "k3")
    torch.testing.assert_close(k3, torch.tensor([0.1065307 + 0.7182818, 0.0]))


def test_tis_weights_by_hand():
    old = torch.tensor([[-1.0, -1.0, -1.0, 7.0]])
    sampler = torch.tensor([[-1.0, -1.5, -3.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    weights, capped = tis_weights(old, sampler, mask, cap=2.0)
    # exp(0) = 1, exp(.5) = 1.6487213, exp(2) = 7.389 -> capped at 2; padding -> 1
    torch.testing.assert_close(weights, torch.tensor([[1.0, 1.6487213, 2.0, 1.0]]))
    assert capped.tolist() == [[False, False, True, False]]


def test_tis_multiplies_the_policy_gradient_term():
    logprobs, old, adv, mask = _ratios_batch()  # ratios .5, 1, 1.5; old logprobs 0
    # w = min(exp(0 - sampler), 2): row 0 (A = +1) 2, 1, 0.5; row 1 (A = -1) all 1
    sampler = torch.tensor([[-5.0, 0.0, math.log(2.0)], [0.0, 0.0, 0.0]])
    loss, metrics = grpo_loss(
        logprobs, old, adv, mask, knobs(tis_cap=2.0), sampler_logprobs=sampler
    )
    # row 0 surrogate -.5, -1, -1.2 weighted -> -1, -1, -.6: mean -2.6/3; row 1 mean 1.1
    assert loss.item() == pytest.approx((-2.6 / 3 + 1.1) / 2)
    assert metrics["tis_weight_mean"] == pytest.approx((2 + 1 + 0.5 + 3) / 6)
    assert metrics["tis_clip_frac"] == pytest.approx(1 / 6)
    loss.backward()
    # the weight is a constant (detached): gradient -A r w / 6, still 0 where clipped
    expected = torch.tensor([[-0.5 * 2 / 6, -1 / 6, 0.0], [0.0, 1 / 6, 1.5 / 6]])
    torch.testing.assert_close(logprobs.grad, expected)


def test_tis_without_sampler_logprobs_is_refused():
    logprobs, old, adv, mask = _ratios_batch()
    with pytest.raises(ValueError, match="sampler_logprobs"):
        grpo_loss(logprobs, old, adv, mask, knobs(tis_cap=2.0))


def test_kl_estimators_in_the_loss_by_hand():
    logprobs = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    ref = torch.tensor([[-1.5, -1.0]])  # log r = (.5, -1)
    expected = {"k1": (0.5 - 1.0) / 2, "k2": (0.125 + 0.5) / 2, "k3": (0.1065307 + 0.7182818) / 2}
    for estimator, kl in expected.items():
        loss, metrics = grpo_loss(
            logprobs,
            logprobs.detach(),
            torch.zeros(1),
            torch.ones(1, 2),
            knobs(beta=0.5, kl_estimator=estimator),
            ref_logprobs=ref,
        )
        assert loss.item() == pytest.approx(0.5 * kl, rel=1e-5), estimator
        assert metrics["kl"] == pytest.approx(kl, rel=1e-5), estimator


# ---- GSPO: sequence-level ratios -----------------------------------------------------------------


def _two_completions():
    """Two completions (3 and 2 tokens), their logprobs before and after, advantages."""
    old = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -0.7, 0.0]])
    new = torch.tensor([[-0.9, -2.1, -0.4], [-0.2, -0.7, 0.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    return new, old, mask, torch.tensor([1.0, -0.5])


def test_sequence_ratio_is_the_geometric_mean_and_the_loss_averages_completions():
    new, old, mask, adv = _two_completions()
    sequence = knobs(seq_clip_eps_low=1.0, seq_clip_eps_high=1.0, ratio_level="sequence")
    loss, metrics = grpo_loss(new, old, adv, mask, sequence)
    s = [math.exp((0.1 - 0.1 + 0.1) / 3), math.exp(0.1 / 2)]  # exp(mean log-ratio)
    assert loss.item() == pytest.approx(-(s[0] * 1.0 + s[1] * -0.5) / 2, rel=1e-6)
    assert metrics["ratio_mean"] == pytest.approx((3 * s[0] + 2 * s[1]) / 5, rel=1e-6)
    loss.backward()
    # d loss / d logp[i, t] = -A_i s_i / (|y_i| B) on every token of completion i
    want = torch.tensor([[-s[0] / 6] * 3, [0.5 * s[1] / 4] * 2 + [0.0]])
    torch.testing.assert_close(new.grad, want)


def test_sequence_clip_removes_the_gradient_of_a_completion_out_of_range():
    new, old, mask, adv = _two_completions()
    # s_0 = exp(0.1/3) = 1.034 > 1 + 0.01 with A > 0: clipped; s_1 = exp(0.05) with A < 0: kept
    # GSPO's own clip range applies; the token one (0.2) would not clip s_0
    sequence = knobs(seq_clip_eps_low=0.01, seq_clip_eps_high=0.01, ratio_level="sequence")
    loss, metrics = grpo_loss(new, old, adv, mask, sequence)
    s1 = math.exp(0.05)
    assert loss.item() == pytest.approx(-(1.01 * 1.0 + s1 * -0.5) / 2, rel=1e-6)
    assert metrics["clip_frac"] == pytest.approx(3 / 5)  # completion 0's three tokens
    loss.backward()
    assert torch.equal(new.grad[0], torch.zeros(3))
    torch.testing.assert_close(new.grad[1], torch.tensor([0.5 * s1 / 4] * 2 + [0.0]))


def test_one_token_completions_give_the_token_level_loss_and_gradient():
    torch.manual_seed(0)
    old = torch.randn(5, 1) - 1
    base = (old + 0.3 * torch.randn(5, 1)).detach()
    mask, adv = torch.ones(5, 1), torch.randn(5)
    sampler = old + 0.1 * torch.randn(5, 1)
    results = []
    for level in ("token", "sequence"):
        new = base.clone().requires_grad_(True)
        config = knobs(
            clip_eps_low=0.2, clip_eps_high=0.25, seq_clip_eps_low=0.2, seq_clip_eps_high=0.25,
            tis_cap=1.5, ratio_level=level,
        )  # fmt: skip
        loss, _ = grpo_loss(new, old, adv, mask, config, sampler_logprobs=sampler)
        loss.backward()
        results.append((loss.detach(), new.grad))
    torch.testing.assert_close(results[0][0], results[1][0])
    torch.testing.assert_close(results[0][1], results[1][1])


def test_sequence_ratios_refuse_token_weighted_aggregations():
    with pytest.raises(ValueError, match="needs aggregation = 'seq_mean_token_mean'"):
        LossConfig(ratio_level="sequence", aggregation="token_mean")


# ---- the choices the config makes: clip range, KL weight, Dr. GRPO's length -------------------


def test_the_clip_range_is_gspos_with_sequence_ratios_else_the_token_one():
    config = {"clip_eps_low": 0.2, "clip_eps_high": 0.28, "seq_clip_eps_low": 3e-4}
    assert clip_range(LossConfig(**config)) == (0.2, 0.28)
    assert clip_range(LossConfig(**config, ratio_level="sequence")) == (3e-4, 4e-4)


def test_the_kl_is_a_loss_term_at_the_controllers_beta_unless_charged_in_the_reward():
    logprobs = torch.tensor([[-1.0]], requires_grad=True)
    batch = (logprobs, logprobs.detach(), torch.zeros(1), torch.ones(1, 1))
    ref = torch.tensor([[-1.5]])  # k3(log r = 0.5) = 0.1065307
    loss, _ = grpo_loss(*batch, knobs(beta=0.5), beta=0.2, ref_logprobs=ref)
    assert loss.item() == pytest.approx(0.2 * 0.1065307, rel=1e-5)  # the controller's beta
    loss, metrics = grpo_loss(*batch, knobs(beta=0.5, kl_in="reward"))  # no reference needed
    assert loss.item() == 0.0 and metrics["kl"] == 0.0


def test_dr_grpos_length_is_max_len_or_the_batchs_longest_completion():
    assert length_normaliser(LossConfig(), [3, 7, 5]) == 7
    assert length_normaliser(LossConfig(max_len=512), [3, 7, 5]) == 512
