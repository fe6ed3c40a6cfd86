"""The math's sections: ``[algorithm]``, every knob of the GRPO math, read by ``algorithm/``
(the story is told once, in ``algorithm/__init__.py``), and ``[reward]``, which reward terms
are summed, with what weights.

``[algorithm]`` has two tables: ``[algorithm.advantage]`` (:class:`AdvantageConfig`: from a
step's rewards to each sample's advantage, on the driver) and ``[algorithm.loss]``
(:class:`LossConfig`: the objective the learner minimises and beta's controller). The loss takes
the whole :class:`LossConfig` (``algorithm.loss.grpo_loss``), never its keys one by one.

Reward terms are a table keyed by the name they are logged under (``reward/<name>/mean``;
examples in docs/rewards.md): a table, not a list of tables, so the resolved config round-trips
through ``Config.to_toml`` and ``--reward.terms.scorer.weight 0.2`` overrides one term. Listing
terms replaces the default (``execution`` alone, weight 1).

Options of built-in terms are validated here, and user-defined functions are imported here, so a
typo fails at config load, before any actor starts.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, model_validator

from common.config.base import Section
from common.config.user_terms import load_user_term

KLEstimator = Literal["k1", "k2", "k3"]
KlControlMode = Literal["fixed", "adaptive", "linear"]
RatioLevel = Literal["token", "sequence"]
Aggregation = Literal["seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm"]


class KalmanConfig(Section):
    """The per-problem running baseline (``algorithm.advantage.baseline = "kalman"``; the
    module ``algorithm/advantage/kalman.py``)."""

    process_noise: float = Field(
        0.01, ge=0, description="Q: variance a problem's mean reward drifts by per step"
    )
    reward_variance: float = Field(
        0.25, gt=0, description="R x n: variance of one completion's reward around its mean"
    )
    initial_mean: float = Field(0.0, description="prior mean reward of a new problem")
    initial_variance: float = Field(1.0, gt=0, description="P0: uncertainty of a new problem")
    std_floor: float = Field(
        0.1, gt=0, description="scale = group_std: the smallest divisor (a uniform group has 0)"
    )


class AdvantageConfig(Section):
    """``[algorithm.advantage]``: from a step's rewards to each sample's advantage (the package
    ``algorithm/advantage/``)."""

    baseline: Literal["group_mean", "kalman"] = Field(
        "group_mean", description="group_mean: GRPO; kalman: a per-problem running estimate"
    )
    scale: Literal["group_std", "batch_std", "none"] = Field(
        "group_std",
        description="divide the centred rewards by the group's std (GRPO), the batch's, or "
        "nothing (Dr. GRPO); with the Kalman baseline group_std or none; with `kalman`, "
        "`group_std` divides by max(group std, `kalman.std_floor`)",
    )
    eps: float = Field(1e-4, gt=0, description="added to the std (group_mean baseline)")
    reward_scale: float = Field(
        1.0,
        gt=0,
        description="DGRO: multiplies advantages, decoupled from beta (DGRO-style variance-aware "
        "scaling)",
    )
    kalman: KalmanConfig = KalmanConfig()
    dynamic_sampling: bool = Field(
        False, description="drop groups whose rewards are all equal and sample more prompts (DAPO)"
    )
    max_sampling_rounds: int = Field(
        4,
        ge=1,
        description="rollout rounds per step, the ordinary one included (with `dynamic_sampling`)",
    )
    tie_noise: float = Field(
        0.0,
        ge=0,
        description="heuristic, off at 0: zero-mean Gaussian noise of this std added to the "
        "rewards of groups whose reward std is at most tie_noise_below, so tied groups still "
        "push the policy somewhere (exploration) instead of giving no gradient. With `scale = "
        '"group_std"` a noised group\'s advantages are of size 1 whatever the std, as strong as '
        "a real signal's; the std sets their size only with `none` or `batch_std`. It adds "
        "gradient variance and cost the demo reward "
        "([benchmarks.md](benchmarks.md#optimisation-options-on-the-demo)); "
        "`advantage/tie_noise_frac` is the share of groups it touched",
    )
    tie_noise_below: float = Field(
        1e-6, ge=0, description="tie_noise: the group reward std at or below which it applies"
    )
    low_variance_temperature: float = Field(
        0.0,
        ge=0,
        description="heuristic, off at 0, needs dynamic_sampling: a later sampling round first "
        "samples the prompts of the previous round's tied groups again at this (higher) "
        "temperature, then new prompts for the rest; those completions are trained on at the "
        "temperature they were sampled at. A hotter sampler may break the tie; training at the "
        "sampled temperature keeps sampler and learner logprobs matched "
        "(`advantage/resampled_groups` counts the groups)",
    )

    @model_validator(mode="after")
    def _check_scale(self) -> AdvantageConfig:
        if self.low_variance_temperature and not self.dynamic_sampling:
            raise ValueError(
                "low_variance_temperature needs dynamic_sampling = true: it resamples the groups "
                "that dynamic sampling drops"
            )
        if self.baseline == "kalman" and self.scale == "batch_std":
            raise ValueError(
                "scale = 'batch_std' is not defined for the Kalman baseline: use group_std "
                "(divided by max(group std, kalman.std_floor)) or none"
            )
        return self


class LossConfig(Section):
    """``[algorithm.loss]``: the objective the learner minimises: the KL term and its control,
    the clipped ratio (per token or per sequence), how token terms are averaged, the entropy
    bonus and the importance-sampling cap (``algorithm/loss.py``, ``algorithm/kl_control.py``)."""

    beta: float = Field(0.0, ge=0, description="KL-to-reference weight; 0 skips the reference")
    kl_estimator: KLEstimator = Field(
        "k3", description="the KL estimator (Schulman's k1, k2 or k3)"
    )
    kl_control: KlControlMode = Field(
        "fixed",
        description="beta fixed; adaptive (PPO's controller toward kl_target); or linear from "
        "beta to beta_final over the run; `adaptive` keeps the drift from the reference near a "
        "budget instead of guessing beta; `linear` is a pull that loosens as training goes. "
        "Needs `beta > 0`; the current value is `train/beta`, saved in checkpoints",
    )
    kl_target: float = Field(
        0.01, gt=0, description="adaptive kl_control: the per-token KL beta steers toward"
    )
    kl_horizon: int = Field(
        10_000,
        ge=1,
        description="adaptive kl_control: samples over which beta adapts (a step moves beta by "
        "at most 20% x samples / horizon)",
    )
    beta_final: float = Field(0.0, ge=0, description="linear kl_control: beta at the last step")
    clip_eps_low: float = Field(0.2, ge=0, description="PPO ratio clip below 1")
    clip_eps_high: float = Field(
        0.2, ge=0, description="PPO ratio clip above 1 (raise it for clip-higher, DAPO)"
    )
    ratio_level: RatioLevel = Field(
        "token",
        description="token: a ratio per token (GRPO); sequence: GSPO's one ratio per "
        "completion, the geometric mean of its token ratios, clipped with seq_clip_eps_*; "
        "`sequence` is steadier when long completions make single token ratios noisy; needs "
        '`aggregation = "seq_mean_token_mean"`',
    )
    seq_clip_eps_low: float = Field(
        3e-4,
        ge=0,
        description="GSPO's clip range below 1 (its paper's value) (sequence ratios sit much "
        "closer to 1 than token ratios)",
    )
    seq_clip_eps_high: float = Field(
        4e-4, ge=0, description="GSPO's clip range above 1 (its paper's value)"
    )
    aggregation: Aggregation = Field(
        "seq_mean_token_mean",
        description="loss aggregation: `seq_mean_token_mean` (GRPO), `token_mean` (DAPO), "
        "`seq_mean_token_sum_norm` (Dr. GRPO)",
    )
    entropy_coef: float = Field(0.0, ge=0, description="entropy bonus")
    max_len: int = Field(0, ge=0, description="Dr. GRPO length normaliser; 0: longest in batch")
    kl_in: Literal["loss", "reward"] = Field(
        "loss", description="KL as a loss term, or -beta*KL per sequence in the reward"
    )
    tis_cap: float = Field(
        2.0,
        ge=0,
        description="truncated importance-sampling cap on pi_old/pi_sampler; 0: off; weight "
        "min(pi_old/pi_sampler, cap) on each token: corrects the engine's numerics and, in "
        "async mode, staleness",
    )

    @model_validator(mode="after")
    def _check_loss(self) -> LossConfig:
        if self.ratio_level == "sequence" and self.aggregation != "seq_mean_token_mean":
            raise ValueError(
                f"ratio_level = 'sequence' (GSPO) needs aggregation = 'seq_mean_token_mean', not "
                f"{self.aggregation!r}: its ratio, clip and loss are one per completion, averaged "
                "over completions; a token-weighted average would count long completions' "
                "sequence terms many times"
            )
        if self.kl_control != "fixed" and self.beta <= 0:
            raise ValueError(
                f"kl_control = {self.kl_control!r} needs beta > 0: beta is where it starts, and "
                "the reference it measures KL against is only built when beta > 0"
            )
        return self


class AlgorithmConfig(Section):
    """``[algorithm]``: every knob of the GRPO math, advantages then loss."""

    advantage: AdvantageConfig = AdvantageConfig()
    loss: LossConfig = LossConfig()


# ---- [reward] ------------------------------------------------------------------------------


class NoOptions(Section):
    """``format`` takes no options."""


class ExecutionOptions(Section):
    mode: Literal["binary", "partial"] = Field(
        "partial",
        description="binary: 1 iff every test passes (the sandbox stops at the first failure, "
        "when every execution term is binary); partial: the fraction of tests passed",
    )


class LengthOptions(Section):
    """DAPO's soft overlong punishment (Yu et al. 2025, eq. 13), in completion tokens."""

    max_len: int = Field(0, ge=0, description="L_max; 0: rollout.max_new_tokens")
    cache_len: int = Field(
        0, ge=0, description="L_cache: the penalty ramps over the last cache_len tokens; 0: L/4"
    )

    @model_validator(mode="after")
    def _check(self) -> LengthOptions:
        if self.max_len and self.cache_len > self.max_len:
            raise ValueError(
                f"cache_len ({self.cache_len}) must be at most max_len ({self.max_len}): the "
                "penalty ramps from max_len - cache_len to max_len"
            )
        return self


class ScorerOptions(Section):
    """A learned scorer (reward model or process reward model) hosted in its own actor."""

    path: str = Field(
        description="HF model directory; 'builtin:tiny-scorer' builds a tiny random one"
    )
    head: Literal["classifier", "value_head"] = Field(
        "classifier",
        description="classifier: AutoModelForSequenceClassification (1 label: raw score, "
        "2 labels: P(label 1)); value_head: a causal LM with a v_head linear on the last "
        "hidden state",
    )
    max_length: int = Field(512, ge=8, description="tokens of prompt + completion (left-cut)")
    batch_size: int = Field(16, ge=1, description="texts per forward pass")
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32", description="dtype the scorer runs in"
    )
    step_split: str = Field(
        "",
        description="process reward: '' scores the whole completion; 'line', 'blank_line' or a "
        "regex cut it into steps and every prefix is scored",
    )
    step_aggregate: Literal["min", "mean", "last"] = Field(
        "min",
        description="process reward: how the prefixes' scores combine (`min`: a solution is as "
        "good as its worst step)",
    )
    num_cpus: float = Field(1.0, ge=0, description="CPUs of the scorer's actor")
    num_gpus: float = Field(0.0, ge=0, description="GPUs of the scorer's actor")

    @model_validator(mode="after")
    def _check_split(self) -> ScorerOptions:
        if self.step_split not in ("", "line", "blank_line"):
            try:
                re.compile(self.step_split)
            except re.error as exc:
                raise ValueError(
                    f"step_split {self.step_split!r} is not 'line', 'blank_line' or a valid "
                    f"regex: {exc}"
                ) from None
        return self


OPTIONS = {
    "execution": ExecutionOptions,
    "format": NoOptions,
    "length": LengthOptions,
    "scorer": ScorerOptions,
}


class RewardTermConfig(Section):
    weight: float = Field(1.0, description="the term's weight in the sum")
    kind: str = Field(
        "",
        description="the built-in this term is ('' : its name), e.g. two 'scorer' terms; one of "
        "`execution`, `format`, `length`, `scorer`",
    )
    function: str = Field(
        "", description="'module:function' for a user-defined term; '': the built-in of this name"
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="built-in: its options; user-defined: keyword arguments of the function",
    )


def _default_terms() -> dict[str, RewardTermConfig]:
    return {"execution": RewardTermConfig()}


class RewardConfig(Section):
    terms: dict[str, RewardTermConfig] = Field(default_factory=_default_terms)

    @model_validator(mode="after")
    def _check_terms(self) -> RewardConfig:
        if not self.terms:
            raise ValueError("terms is empty: a step needs at least one reward term")
        for name, term in self.terms.items():
            term_options(name, term)
            if term.function:
                load_user_term(name, term.function, term.options)
        return self

    def stops_at_first_failure(self) -> bool:
        """Whether the sandbox may stop a completion's tests at the first failure: only when
        every execution term is binary (a partial one, or none at all, needs every verdict)."""
        modes = [
            term_options(name, term).mode  # type: ignore[union-attr]
            for name, term in self.terms.items()
            if builtin_kind(name, term) == "execution"
        ]
        return bool(modes) and all(mode == "binary" for mode in modes)

    def scorer_terms(self) -> dict[str, ScorerOptions]:
        """The learned-scorer terms (each gets its own actor), by name."""
        return {
            name: term_options(name, term)
            for name, term in self.terms.items()
            if builtin_kind(name, term) == "scorer"
        }


def builtin_kind(name: str, term: RewardTermConfig) -> str | None:
    """Which built-in a term is; ``None`` for a user-defined one."""
    return None if term.function else term.kind or name


def term_options(name: str, term: RewardTermConfig) -> BaseModel | None:
    """A built-in term's validated options; ``None`` for a user-defined term."""
    kind = builtin_kind(name, term)
    if kind is None:
        if term.kind:
            raise ValueError(f"reward term {name!r}: set kind or function, not both")
        return None
    if kind not in OPTIONS:
        raise ValueError(
            f"reward term {name!r}: {kind!r} is not a built-in ({', '.join(OPTIONS)}); "
            "give it function = 'module:function' to define it yourself"
        )
    try:
        return OPTIONS[kind].model_validate(term.options)
    except ValidationError as exc:
        details = "; ".join(_describe(e) for e in exc.errors())
        raise ValueError(f"reward term {name!r}: {details}") from None


def _describe(error: dict) -> str:
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        message = "unknown option"
    where = ".".join(map(str, error["loc"]))
    return f"{where}: {message}" if where else message
