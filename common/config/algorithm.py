"""The ``[reward]`` section: which reward terms are summed, with what weights, and the baseline.

Terms are a table keyed by the name they are logged under (``reward/<name>/mean``)::

    [reward.terms.execution]
    weight = 1.0

    [reward.terms.scorer]
    weight = 0.1
    options = { path = "builtin:tiny-scorer", max_length = 128 }

    [reward.terms.brevity]            # user-defined: any name, plus an import path
    function = "my_rewards:brevity"
    weight = 0.2

A table (not a list of tables) so the resolved config round-trips through ``Config.to_toml`` and
``--reward.terms.scorer.weight 0.2`` overrides one term. Listing terms replaces the default
(``execution`` alone, weight 1), which reproduces the plain execution reward exactly.

Options of built-in terms are validated here, and user-defined functions are imported here, so a
typo fails at config load, before any actor starts.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

BUILTIN_TERMS = ("execution", "format", "length", "scorer")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class NoOptions(_Section):
    """``format`` takes no options."""


class ExecutionOptions(_Section):
    mode: Literal["binary", "partial"] = Field(
        "partial",
        description="binary: 1 iff every test passes (the sandbox stops at the first failure, "
        "when every execution term is binary); partial: the fraction of tests passed",
    )


class LengthOptions(_Section):
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


class ScorerOptions(_Section):
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
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    step_split: str = Field(
        "",
        description="process reward: '' scores the whole completion; 'line', 'blank_line' or a "
        "regex cut it into steps and every prefix is scored",
    )
    step_aggregate: Literal["min", "mean", "last"] = "min"
    num_cpus: float = Field(1.0, ge=0)
    num_gpus: float = Field(0.0, ge=0)

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


class RewardTermConfig(_Section):
    weight: float = 1.0
    kind: str = Field(
        "", description="the built-in this term is ('' : its name), e.g. two 'scorer' terms"
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


class RewardConfig(_Section):
    terms: dict[str, RewardTermConfig] = Field(default_factory=_default_terms)

    @model_validator(mode="after")
    def _check_terms(self) -> RewardConfig:
        if not self.terms:
            raise ValueError("terms is empty: a step needs at least one reward term")
        for name, term in self.terms.items():
            term_options(name, term)
            if term.function:
                from algorithm.rewards.terms import load_user_term

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
            f"reward term {name!r}: {kind!r} is not a built-in ({', '.join(BUILTIN_TERMS)}); "
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
