"""The optimisation options, hand-computed: learning-rate schedules, GSPO's sequence ratio, the
adaptive and linear KL coefficient, tie noise, and resuming with all of them."""

from __future__ import annotations

import math

import pytest
import torch

from algorithm.advantage import tie_noise
from algorithm.kl_control import KlControl
from algorithm.loss import grpo_loss
from common.config import ConfigError, LearnerConfig, load_config
from learner.learner import Learner
from learner.schedule import learning_rate
from tests.unit.test_learner_step import _BASE, _samples, _save_tiny_qwen2


@pytest.fixture(scope="module")
def tied_model(tmp_path_factory) -> str:
    return _save_tiny_qwen2(tmp_path_factory.mktemp("tied"), tie_word_embeddings=True)


def _config(**overrides) -> LearnerConfig:
    return LearnerConfig(**{**_BASE, **overrides})


# ---- learning-rate schedules ------------------------------------------------------------------


def test_warmup_rises_linearly_from_the_first_step():
    lr = 1e-3
    got = [learning_rate(step, lr, "constant", warmup=4) for step in range(6)]
    assert got == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3, 1e-3])


@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_decay_runs_from_lr_after_warmup_to_min_lr_at_the_last_step(schedule):
    lr, floor = 1e-3, 1e-4
    at = {step: learning_rate(step, lr, schedule, 3, 12, floor) for step in range(14)}
    assert at[0] == pytest.approx(lr / 3) and at[2] == pytest.approx(lr)  # warmup
    assert at[3] == pytest.approx(lr)  # decay starts at lr
    # progress (step - 3) / (12 - 3 - 1): half way at step 7, for both shapes
    assert at[7] == pytest.approx((lr + floor) / 2)
    assert at[11] == pytest.approx(floor) and at[13] == pytest.approx(floor)  # then stays
    quarter = 0.75 if schedule == "linear" else 0.5 * (1 + math.cos(math.pi / 4))
    assert at[5] == pytest.approx(floor + (lr - floor) * quarter)


def test_a_decay_needs_steps_beyond_warmup():
    with pytest.raises(ValueError, match="more optimiser steps"):
        learning_rate(5, 1e-3, "cosine", warmup=4, total=4)


def test_learner_follows_the_schedule_in_optimiser_steps(tied_model):
    config = _config(lr_schedule="cosine", warmup_steps=2, min_lr=1e-3, ppo_epochs=2)
    learner = Learner(tied_model, config, total_steps=3)  # 6 optimiser steps
    lrs = [learner.train_step(_samples())["train/lr"] for _ in range(3)]
    want = [learning_rate(k, 1e-2, "cosine", 2, 6, 1e-3) for k in (1, 3, 5)]  # each step's last
    assert lrs == pytest.approx(want, rel=1e-12)
    assert lrs[-1] == pytest.approx(1e-3)


def test_adam_betas_and_eps_reach_the_optimiser(tied_model):
    learner = Learner(tied_model, _config(adam_betas=(0.9, 0.95), adam_eps=1e-6))
    group = learner.optimizer.param_groups[0]
    assert group["betas"] == (0.9, 0.95) and group["eps"] == 1e-6


def test_schedule_settings_are_checked_at_config_time(tied_model):
    with pytest.raises(ValueError, match="warmup_steps or warmup_ratio"):
        _config(warmup_steps=2, warmup_ratio=0.1)
    with pytest.raises(ValueError, match="min_lr"):
        _config(min_lr=1.0)
    with pytest.raises(ValueError, match=r"run\.steps"):
        Learner(tied_model, _config(lr_schedule="linear"))  # no run length given


# ---- GSPO: sequence-level ratios --------------------------------------------------------------


def _two_completions():
    """Two completions (3 and 2 tokens), their logprobs before and after, advantages."""
    old = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -0.7, 0.0]])
    new = torch.tensor([[-0.9, -2.1, -0.4], [-0.2, -0.7, 0.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    return new, old, mask, torch.tensor([1.0, -0.5])


def test_sequence_ratio_is_the_geometric_mean_and_the_loss_averages_completions():
    new, old, mask, adv = _two_completions()
    loss, metrics = grpo_loss(
        new, old, adv, mask, clip_eps_low=1.0, clip_eps_high=1.0, ratio_level="sequence"
    )
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
    loss, metrics = grpo_loss(
        new, old, adv, mask, clip_eps_low=0.01, clip_eps_high=0.01, ratio_level="sequence"
    )
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
        loss, _ = grpo_loss(
            new, old, adv, mask, clip_eps_low=0.2, clip_eps_high=0.25,
            sampler_logprobs=sampler, tis_cap=1.5, ratio_level=level,
        )  # fmt: skip
        loss.backward()
        results.append((loss.detach(), new.grad))
    torch.testing.assert_close(results[0][0], results[1][0])
    torch.testing.assert_close(results[0][1], results[1][1])


def test_sequence_ratios_refuse_token_weighted_aggregations():
    with pytest.raises(ValueError, match="needs aggregation = 'seq_mean_token_mean'"):
        _config(ratio_level="sequence", aggregation="token_mean")
    new, old, mask, adv = _two_completions()
    with pytest.raises(ValueError, match="seq_mean_token_mean"):
        grpo_loss(new, old, adv, mask, aggregation="token_mean", ratio_level="sequence")


def test_learner_trains_with_sequence_ratios(tied_model):
    config = _config(ratio_level="sequence", ppo_epochs=2)
    metrics = Learner(tied_model, config).train_step(_samples())
    assert metrics["train/optimizer_steps"] == 2
    # the second epoch's ratios moved, and GSPO's narrow range clipped some completions
    assert metrics["train/ratio_mean_last_epoch"] != 1.0
    assert metrics["train/clip_frac_last_epoch"] > 0


# ---- the KL coefficient ------------------------------------------------------------------------


def test_adaptive_beta_follows_ppos_controller():
    control = KlControl("adaptive", 0.1, target=0.01, horizon=100)
    # e = clip(KL / target - 1, -0.2, 0.2); beta *= 1 + e * n / horizon, n = 10 samples
    betas = [control.update(kl, 10, step) for step, kl in enumerate((0.02, 0.01, 0.005, 0.011))]
    want, beta = [], 0.1
    for error in (0.2, 0.0, -0.2, 0.1):
        beta *= 1 + error * 10 / 100
        want.append(beta)
    assert betas == pytest.approx(want, rel=1e-12)
    assert betas[0] == pytest.approx(0.102)


def test_linear_beta_goes_from_beta_to_beta_final_over_the_run():
    control = KlControl("linear", 0.1, beta_final=0.02, total_steps=5)
    betas = [control.update(0.0, 8, done) for done in range(1, 7)]
    assert betas == pytest.approx([0.08, 0.06, 0.04, 0.02, 0.02, 0.02])


def test_fixed_beta_never_moves_and_a_moving_beta_needs_one_to_start():
    control = KlControl("fixed", 0.05)
    assert [control.update(1.0, 8, k) for k in range(3)] == [0.05] * 3
    with pytest.raises(ValueError, match="needs beta > 0"):
        _config(kl_control="adaptive", beta=0.0)
    with pytest.raises(ValueError, match=r"run\.steps"):
        KlControl("linear", 0.1, beta_final=0.0)


def test_learner_reports_the_beta_of_each_step_and_adapts_it(tied_model):
    config = _config(beta=0.05, kl_control="adaptive", kl_target=1e-6, kl_horizon=8)
    learner = Learner(tied_model, config)
    betas = [learner.train_step(_samples())["train/beta"] for _ in range(3)]
    # the first step starts at the reference (KL 0: beta shrinks 20% of n / horizon = 20%), then
    # the policy has moved away (KL >> target: beta grows 20%)
    assert betas == pytest.approx([0.05, 0.04, 0.048], rel=1e-9)


# ---- tie noise ---------------------------------------------------------------------------------


def test_tie_noise_touches_only_groups_below_the_threshold():
    rewards = [1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.5, 0.5, None, None, 0.0, 1.0]
    noisy, touched = tie_noise(rewards, 3, sigma=0.1, below=1e-6, seed="0/1")
    assert touched == 2  # [1, 1, 1] and [0.5, 0.5, None]; [None, 0, 1] is not tied
    assert noisy[3:6] == rewards[3:6] and noisy[9:] == rewards[9:]
    assert noisy[8] is None
    moved = [noisy[i] - rewards[i] for i in (0, 1, 2, 6, 7)]
    assert all(0 < abs(d) < 0.5 for d in moved) and len(set(moved)) == 5
    assert tie_noise(rewards, 3, 0.1, 1e-6, "0/1") == (noisy, touched)  # seeded
    assert tie_noise(rewards, 3, 0.1, 1e-6, "0/2")[0] != noisy


def test_tie_noise_judges_ties_on_the_raw_rewards():
    raw = [1.0, 1.0, 0.0, 1.0]
    shaped = [0.97, 0.95, -0.02, 0.99]  # a KL charged in the reward breaks the exact tie
    noisy, touched = tie_noise(shaped, 2, sigma=0.1, below=1e-6, seed="s", raw=raw)
    assert touched == 1 and noisy[2:] == shaped[2:] and noisy[:2] != shaped[:2]
    assert tie_noise(shaped, 2, 0.1, 1e-6, "s")[1] == 0  # judged on the shaped ones: no tie


def test_tie_noise_threshold_and_zero_mean():
    rewards = [0.5, 0.52] * 4000
    noisy, touched = tie_noise(rewards, 2, sigma=0.05, below=0.0101, seed="x")
    assert touched == 4000  # each group's std is 0.01
    assert tie_noise(rewards, 2, 0.05, 0.0099, "x")[1] == 0
    # zero-mean: the mean shift of 8000 draws of std 0.05 (seeded: one fixed draw) is within 4
    # of its standard errors
    shift = sum(n - r for n, r in zip(noisy, rewards, strict=True)) / len(rewards)
    assert abs(shift) < 4 * 0.05 / math.sqrt(len(rewards))


# ---- resume -----------------------------------------------------------------------------------


def test_resume_continues_the_schedule_and_beta_exactly(tied_model, tmp_path):
    config = _config(
        lr_schedule="cosine", warmup_steps=1, min_lr=1e-3, beta=0.05, kl_control="adaptive",
        kl_target=1e-4, kl_horizon=16,
    )  # fmt: skip
    keys = ("train/lr", "train/beta")
    straight = Learner(tied_model, config, total_steps=4)
    whole = [straight.train_step(_samples(seed=k)) for k in range(4)]
    first = Learner(tied_model, config, total_steps=4)
    for k in range(2):
        first.train_step(_samples(seed=k))
    first.save_checkpoint(str(tmp_path / "ckpt"))
    resumed = Learner(tied_model, config, total_steps=4)
    resumed.load_training_state(str(tmp_path / "ckpt"))
    rest = [resumed.train_step(_samples(seed=k)) for k in (2, 3)]
    for want, got in zip(whole[2:], rest, strict=True):
        assert [got[k] for k in keys] == [want[k] for k in keys]
    assert len({m["train/beta"] for m in whole}) == 4  # beta moved every step
    # optimiser settings come from the config on resume, not from the checkpoint
    changed = config.model_copy(update={"adam_betas": (0.9, 0.95), "adam_eps": 1e-6})
    again = Learner(tied_model, changed, total_steps=4)
    again.load_training_state(str(tmp_path / "ckpt"))
    group = again.optimizer.param_groups[0]
    assert group["betas"] == (0.9, 0.95) and group["eps"] == 1e-6


def test_options_load_from_a_config_file(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text(
        "[learner]\nlr_schedule = 'cosine'\nwarmup_ratio = 0.1\nadam_betas = [0.9, 0.95]\n"
        "ratio_level = 'sequence'\nbeta = 0.01\nkl_control = 'linear'\nbeta_final = 0.001\n"
        "[advantage]\ntie_noise = 0.05\n"
    )
    config = load_config(path)
    assert config.learner.adam_betas == (0.9, 0.95) and config.advantage.tie_noise == 0.05
    path.write_text("[learner]\nratio_level = 'sequence'\naggregation = 'token_mean'\n")
    with pytest.raises(ConfigError, match="seq_mean_token_mean"):
        load_config(path)


# ---- samples drawn at their own temperature (advantage.low_variance_temperature) ---------------


def test_rows_with_their_own_temperature_are_scored_at_it(tied_model):
    import dataclasses

    learner = Learner(tied_model, _config(), temperature=0.7)
    samples = _samples(4)
    hot = [dataclasses.replace(s, temperature=1.5) if i % 2 else s for i, s in enumerate(samples)]
    mixed = learner.policy_logprobs(hot)
    at_run, at_hot = learner.policy_logprobs(samples), learner.policy_logprobs(samples, 1.5)
    for i, row in enumerate(mixed):
        torch.testing.assert_close(row, (at_hot if i % 2 else at_run)[i])
    assert not torch.allclose(at_run[1], at_hot[1])
    # an explicit temperature (the parity probe's 1.0) still overrides every row
    for row, want in zip(learner.policy_logprobs(hot, 1.0), learner.policy_logprobs(samples, 1.0)):
        torch.testing.assert_close(row, want)


def test_the_full_logits_path_scales_each_row_too(tied_model):
    from transformers import AutoModelForCausalLM

    from learner.batching import collate
    from learner.logprobs import _full_logits_logprobs, completion_logprobs

    model = AutoModelForCausalLM.from_pretrained(tied_model)
    batch = collate(_samples(3), [0, 1, 2])
    temperatures = torch.tensor([0.5, 1.0, 2.0])
    args = (model, batch.input_ids, batch.attention_mask, batch.completion_mask)
    with torch.no_grad():
        full = _full_logits_logprobs(*args, temperatures, False)
        chunked = completion_logprobs(*args, temperatures, chunk_tokens=3)
        for row, t in enumerate(temperatures.tolist()):
            want = completion_logprobs(*args, t)[row]
            torch.testing.assert_close(full[row], want, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(chunked[row], want, atol=1e-5, rtol=1e-5)


def test_low_variance_temperature_needs_dynamic_sampling():
    from common.config import AdvantageConfig

    with pytest.raises(ValueError, match="needs dynamic_sampling"):
        AdvantageConfig(low_variance_temperature=1.5)
    assert AdvantageConfig(low_variance_temperature=1.5, dynamic_sampling=True)
