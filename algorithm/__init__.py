"""GRPO in one package: from a step's rewards to the loss the learner minimises.

Modules: ``rewards`` (terms and their sum), ``advantage`` (baselines, shaping, dynamic sampling),
``loss`` and ``kl_control``; the driver calls the first two, the learner the last two. Functions
on lists and tensors plus small state holders; it imports ``common`` and torch, never a role.
This file re-exports nothing: ``rewards`` must import without torch (a user's reward module at
config load, the sandbox's ``reward``), and a package's ``__init__`` runs before any submodule.
Below, ``section.key`` is a config option and ``algorithm.x`` a module.

GRPO (Shao et al. 2024, "DeepSeekMath", section 4.1), the defaults: sample G completions per
prompt, score each (the sandbox's verdict), A_i = (r_i - mean(r)) / (std(r) + eps) within the
group, no value network (``algorithm.advantage.group``), then minimise per completion token
-min(rho A_i, clip(rho, 1 - eps_low, 1 + eps_high) A_i) + beta KL_t, averaged over each
completion's tokens, then over completions (``algorithm.loss``). ``learner.beta`` is 0 by
default: no reference model, no KL term. Departures (population std, exactly 0 for a tied
group, ``None`` rewards masked, never 0) are in those two modules' docstrings.

Variants, each off unless said:
- Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training"): ``advantage.scale = "none"``
  (no std division) and ``learner.aggregation = "seq_mean_token_sum_norm"`` (token sums over a
  constant ``learner.max_len``; 0: the longest completion of the batch).
- DAPO (Yu et al. 2025): clip-higher (``learner.clip_eps_high`` > ``clip_eps_low``), dynamic
  sampling (``advantage.dynamic_sampling``: tied groups dropped, more prompts sampled;
  ``algorithm.advantage.dynamic``), token-level mean (``learner.aggregation = "token_mean"``),
  soft overlong punishment (the ``length`` reward term).
- GSPO (Zheng et al. 2025): ``learner.ratio_level = "sequence"``, one ratio per completion, the
  geometric mean of its token ratios, clipped by ``learner.seq_clip_eps_low`` / ``_high``.
- KL estimators (Schulman 2020, "Approximating KL divergence"), ``learner.kl_estimator``: with
  log r = logp - logp_ref, k1 = log r, k2 = (log r)^2 / 2, k3 = 1/r + log r - 1 (the default).
- KL in the reward (``learner.kl_in = "reward"``, as in Ziegler et al. 2019): r_i - beta * KL_i,
  KL_i summed over the completion, before the advantages (``algorithm.advantage.step``).
- beta's controller (``learner.kl_control``; ``algorithm.kl_control``): fixed (the default);
  adaptive, PPO's proportional controller toward ``learner.kl_target`` (Ziegler et al. 2019,
  "Fine-tuning language models from human preferences"); linear to ``learner.beta_final``.
- TIS (Yao et al. 2025, "Your efficient RL framework secretly brings you off-policy RL
  training"), on by default: vLLM's logprobs differ from the learner's, so each token's
  policy-gradient term is weighted by min(pi_old / pi_sampler, ``learner.tis_cap``), detached.
- PPO-style reuse of a batch (``learner.ppo_epochs``, ``learner.mini_batches``): pi_old is the
  learner's logprob before the first update.
- Kalman baseline (``advantage.baseline = "kalman"``; ``algorithm.advantage.kalman``): each
  problem's expected reward tracked by a 1-D Kalman filter across steps (after KRPO, Wang et al.
  2025, which filters within a group), so a tied group of a problem that used to fail still
  gets an advantage.
- Scaling: ``advantage.scale = "batch_std"`` divides by the batch's std, not the group's;
  ``advantage.reward_scale`` multiplies advantages independently of beta (DGRO-style);
  ``learner.entropy_coef`` adds an entropy bonus.
- Heuristics from the users' DGRO script: noise on tied groups' rewards (``advantage.tie_noise``;
  ``algorithm.advantage.noise``) and, with dynamic sampling, tied prompts sampled again hotter
  (``advantage.low_variance_temperature``; ``algorithm.advantage.dynamic``).

Rewards (``algorithm.rewards``): a weighted sum of terms, each a batch -> ``float | None``
function (None masks the completion out of the loss): ``execution`` (binary or partial credit),
``format``, ``length`` (DAPO), ``scorer`` (a learned outcome or process reward model; a process
reward aggregates its steps' scores, ``min`` by default after Lightman et al. 2023:
``algorithm.rewards.steps``) and user ``module:function`` terms. A multi-turn episode may
discount its reward by the turn that solved it (``algorithm.rewards.episode``).
"""
