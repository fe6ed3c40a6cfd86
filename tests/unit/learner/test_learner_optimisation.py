"""The optimisation options in the learner, hand-computed: the learning-rate schedule it follows,
GSPO's sequence ratio, the KL coefficient it reports and adapts, and resuming with all of them.
The math alone is tested beside its module: learner/test_schedule.py, algorithm/test_loss.py,
algorithm/test_kl_control.py and algorithm/advantage/test_noise.py."""

from __future__ import annotations

import pytest
import torch

from common.config import ConfigError, LossConfig, load_config
from learner.learner import Learner
from learner.schedule import learning_rate
from tests.unit.learner.helpers import learner_config, tiny_samples

# ---- learning-rate schedules ------------------------------------------------------------------


def test_learner_follows_the_schedule_in_optimiser_steps(tied_model):
    config = learner_config(lr_schedule="cosine", warmup_steps=2, min_lr=1e-3, ppo_epochs=2)
    learner = Learner(tied_model, config, total_steps=3)  # 6 optimiser steps
    lrs = [learner.train_step(tiny_samples())["train/lr"] for _ in range(3)]
    want = [learning_rate(k, 1e-2, "cosine", 2, 6, 1e-3) for k in (1, 3, 5)]  # each step's last
    assert lrs == pytest.approx(want, rel=1e-12)
    assert lrs[-1] == pytest.approx(1e-3)


def test_adam_betas_and_eps_reach_the_optimiser(tied_model):
    learner = Learner(tied_model, learner_config(adam_betas=(0.9, 0.95), adam_eps=1e-6))
    group = learner.optimizer.param_groups[0]
    assert group["betas"] == (0.9, 0.95) and group["eps"] == 1e-6


def test_schedule_settings_are_checked_at_config_time(tied_model):
    with pytest.raises(ValueError, match="warmup_steps or warmup_ratio"):
        learner_config(warmup_steps=2, warmup_ratio=0.1)
    with pytest.raises(ValueError, match="min_lr"):
        learner_config(min_lr=1.0)
    with pytest.raises(ValueError, match=r"run\.steps"):
        Learner(tied_model, learner_config(lr_schedule="linear"))  # no run length given


# ---- GSPO: sequence-level ratios --------------------------------------------------------------


def test_learner_trains_with_sequence_ratios(tied_model):
    config, gspo = learner_config(ppo_epochs=2), LossConfig(ratio_level="sequence")
    metrics = Learner(tied_model, config, loss=gspo).train_step(tiny_samples())
    assert metrics["train/optimizer_steps"] == 2
    # the second epoch's ratios moved, and GSPO's narrow range clipped some completions
    assert metrics["train/ratio_mean_last_epoch"] != 1.0
    assert metrics["train/clip_frac_last_epoch"] > 0


# ---- the KL coefficient ------------------------------------------------------------------------


def test_learner_reports_the_beta_of_each_step_and_adapts_it(tied_model):
    loss = LossConfig(beta=0.05, kl_control="adaptive", kl_target=1e-6, kl_horizon=8)
    learner = Learner(tied_model, learner_config(), loss=loss)
    betas = [learner.train_step(tiny_samples())["train/beta"] for _ in range(3)]
    # the first step starts at the reference (KL 0: beta shrinks 20% of n / horizon = 20%), then
    # the policy has moved away (KL >> target: beta grows 20%)
    assert betas == pytest.approx([0.05, 0.04, 0.048], rel=1e-9)


# ---- resume -----------------------------------------------------------------------------------


def test_resume_continues_the_schedule_and_beta_exactly(tied_model, tmp_path):
    config = learner_config(lr_schedule="cosine", warmup_steps=1, min_lr=1e-3)
    loss = LossConfig(beta=0.05, kl_control="adaptive", kl_target=1e-4, kl_horizon=16)
    keys = ("train/lr", "train/beta")
    straight = Learner(tied_model, config, loss=loss, total_steps=4)
    whole = [straight.train_step(tiny_samples(seed=k)) for k in range(4)]
    first = Learner(tied_model, config, loss=loss, total_steps=4)
    for k in range(2):
        first.train_step(tiny_samples(seed=k))
    first.save_checkpoint(str(tmp_path / "ckpt"))
    resumed = Learner(tied_model, config, loss=loss, total_steps=4)
    resumed.load_training_state(str(tmp_path / "ckpt"))
    rest = [resumed.train_step(tiny_samples(seed=k)) for k in (2, 3)]
    for want, got in zip(whole[2:], rest, strict=True):
        assert [got[k] for k in keys] == [want[k] for k in keys]
    assert len({m["train/beta"] for m in whole}) == 4  # beta moved every step
    # optimiser settings come from the config on resume, not from the checkpoint
    changed = config.model_copy(update={"adam_betas": (0.9, 0.95), "adam_eps": 1e-6})
    again = Learner(tied_model, changed, loss=loss, total_steps=4)
    again.load_training_state(str(tmp_path / "ckpt"))
    group = again.optimizer.param_groups[0]
    assert group["betas"] == (0.9, 0.95) and group["eps"] == 1e-6


def test_options_load_from_a_config_file(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text(
        "[learner]\nlr_schedule = 'cosine'\nwarmup_ratio = 0.1\nadam_betas = [0.9, 0.95]\n"
        "[algorithm.loss]\nratio_level = 'sequence'\nbeta = 0.01\nkl_control = 'linear'\n"
        "beta_final = 0.001\n[algorithm.advantage]\ntie_noise = 0.05\n"
    )
    config = load_config(path)
    assert config.learner.adam_betas == (0.9, 0.95)
    assert config.algorithm.loss.beta_final == 0.001
    assert config.algorithm.advantage.tie_noise == 0.05
    path.write_text("[algorithm.loss]\nratio_level = 'sequence'\naggregation = 'token_mean'\n")
    with pytest.raises(ConfigError, match="seq_mean_token_mean"):
        load_config(path)


# ---- samples drawn at their own temperature (algorithm.advantage.low_variance_temperature) ----


def test_rows_with_their_own_temperature_are_scored_at_it(tied_model):
    import dataclasses

    learner = Learner(tied_model, learner_config(), temperature=0.7)
    samples = tiny_samples(4)
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
    batch = collate(tiny_samples(3), [0, 1, 2])
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
