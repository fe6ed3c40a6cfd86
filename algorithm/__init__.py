"""GRPO in one package: from a step's rewards to the loss the learner minimises. The algorithm
is told here, once; the modules' docstrings say how they compute their part of it.

Modules: ``rewards``, ``advantage`` and ``staleness``, which the driver calls, ``loss`` and
``kl_control``, which the learner does; they import ``common`` and torch, never a role. This file
re-exports nothing: ``rewards`` must import without torch (a user's reward module at config
load), and a package's ``__init__`` runs before any submodule. Below, ``section.key`` is a config
option and ``algorithm/x.py`` a module.

GRPO (Shao et al. 2024, "DeepSeekMath", section 4.1), the defaults:

1. For each prompt q sample a group of G completions o_1..o_G and score them (the sandbox's
   verdict): rewards r_1..r_G.
2. Advantage of completion i, shared by all its tokens: A_i = (r_i - mean(r)) / (std(r) + eps)
   within the group; no value network, the group mean is the baseline
   (``algorithm/advantage/group.py``).
3. Per completion token t, with rho = pi_theta(o_t | q, o_<t) / pi_old(o_t | q, o_<t):
   l_t = -min(rho A_i, clip(rho, 1 - eps_low, 1 + eps_high) A_i) + beta KL_t, KL_t Schulman's
   k3 estimate of KL(pi_theta || pi_ref) (unbiased, never negative).
4. Loss: the mean over each completion's tokens, then over completions; one optimiser step
   (``algorithm/loss.py``). ``algorithm.loss.beta`` is 0 by default: no reference, no KL term.

Where this departs from the paper, and why:

- The group std is the *population* std (TRL uses Bessel's correction): the group is the whole
  population being normalised, so its advantages have unit variance whatever G is (with G = 2
  Bessel's correction shrinks them to +-0.707).
- A group whose rewards are all equal carries no signal: its advantages are exactly 0, not
  0 / (0 + eps); the same rule decides which groups dynamic sampling drops and what
  ``train/zero_std_frac`` counts. ``None`` rewards (the sandbox broke: no verdict) are left out
  of every statistic and keep no advantage, never scored 0; a group with fewer than two rewards
  has no baseline. Advantages are computed in float64.
- pi_old is the learner's own logprob of the batch before the first update (with one epoch and
  one mini-batch that is pi_theta detached: rho = 1, the clip never fires), not the sampler's:
  vLLM's numerics, and in async mode its weights, differ from the learner's. That mismatch is
  corrected by truncated importance sampling (TIS, Yao et al. 2025, "Your efficient RL framework
  secretly brings you off-policy RL training"), on by default: each token's policy-gradient term
  is weighted by min(pi_old / pi_sampler, ``algorithm.loss.tis_cap``), detached.
- An async step trains only on groups at most ``async.max_staleness`` weight versions behind
  the learner (``algorithm/staleness.py``); TIS corrects what is kept.

Variants, each off unless said:
- Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training"): no std division
  (``algorithm.advantage.scale = "none"``) and token sums over a constant
  (``algorithm.loss.aggregation = "seq_mean_token_sum_norm"``, ``algorithm.loss.max_len``; 0:
  the longest completion of the batch), which remove GRPO's bias toward long wrong answers and
  short right ones.
- DAPO (Yu et al. 2025): clip-higher (``algorithm.loss.clip_eps_high`` > ``clip_eps_low``),
  dynamic sampling (``algorithm.advantage.dynamic_sampling``: tied groups dropped, more prompts
  sampled; ``algorithm/advantage/dynamic.py``), token-level mean
  (``algorithm.loss.aggregation = "token_mean"``), soft overlong punishment (the ``length``
  reward term).
- GSPO (Zheng et al. 2025, "Group Sequence Policy Optimization"):
  ``algorithm.loss.ratio_level = "sequence"``, one ratio per completion, the geometric mean of
  its token ratios s_i = exp(mean_t(logp - logp_old)), clipped per completion by GSPO's own,
  much narrower ``algorithm.loss.seq_clip_eps_low`` / ``_high`` (the token ones do not apply):
  l_i = -min(s_i A_i, clip(s_i) A_i), averaged over completions. Its gradient weights every
  token of a completion alike, so one extreme token ratio cannot dominate; TIS is per
  completion too, min(exp(mean_t(old - sampler)), cap).
- KL estimators (Schulman 2020, "Approximating KL divergence"), ``algorithm.loss.kl_estimator``:
  with log r = logp - logp_ref, k1 = log r (unbiased, may be negative), k2 = (log r)^2 / 2
  (low variance, biased), k3 = 1/r + log r - 1 (the default).
- KL in the reward (``algorithm.loss.kl_in = "reward"``, as in Ziegler et al. 2019):
  r_i - beta * KL_i, KL_i summed over the completion (the chain rule's sequence KL), before the
  advantages (``algorithm/advantage/step.py``); the loss then has no KL term.
- beta's controller (``algorithm.loss.kl_control``; ``algorithm/kl_control.py``): fixed (the
  default); adaptive, PPO's proportional controller toward ``algorithm.loss.kl_target``
  (Ziegler et al. 2019, "Fine-tuning language models from human preferences"); linear to
  ``algorithm.loss.beta_final``.
- PPO-style reuse of a batch (``learner.ppo_epochs``, ``learner.mini_batches``): pi_old as
  above, computed once before the first update.
- Kalman baseline (``algorithm.advantage.baseline = "kalman"``; ``algorithm/advantage/kalman.py``):
  each problem's expected reward tracked by a 1-D Kalman filter across steps (after KRPO, Wang
  et al. 2025, which filters within a group), so a tied group of a problem that used to fail
  still gets an advantage.
- Scaling: ``algorithm.advantage.scale = "batch_std"`` divides by the batch's std, not the
  group's; ``algorithm.advantage.reward_scale`` multiplies advantages independently of beta
  (DGRO-style), so the reward signal and the KL pull are tuned apart;
  ``algorithm.loss.entropy_coef`` adds an entropy bonus.
- Heuristics from the users' DGRO script: noise on tied groups' rewards
  (``algorithm.advantage.tie_noise``; ``algorithm/advantage/noise.py``) and, with dynamic sampling,
  tied prompts sampled again hotter and trained on at that temperature
  (``algorithm.advantage.low_variance_temperature``; ``algorithm/advantage/dynamic.py``).

Rewards (``algorithm/rewards/``, docs/rewards.md): a weighted sum of terms, each a batch ->
``float | None`` function (None masks the completion out of the loss).
"""
