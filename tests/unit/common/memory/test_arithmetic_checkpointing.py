"""learner.gradient_checkpointing per decoder layer: the config's four forms, and the memory
arithmetic that counts k checkpointed layers and picks k for "auto"
(common/memory/arithmetic.py)."""

from __future__ import annotations

from functools import partial

import pytest

from common.config import ConfigError, LearnerConfig, load_config
from common.memory.arithmetic import GIB, CheckpointedLayersError, activation_bytes_per_token
from common.memory.fit import (
    checkpointed_layers,
    fit_micro_batch,
    learner_step_peak,
    micro_batch_budget,
)
from common.memory.plan import plan_memory
from tests.unit.public_models import shape

#: These learners train with a KL term (beta 0.04, ``[algorithm.loss]``), so they keep a
#: reference, which the arithmetic counts where it is told so (``with_reference``).
checkpointed_layers = partial(checkpointed_layers, with_reference=True)
fit_micro_batch = partial(fit_micro_batch, with_reference=True)
learner_step_peak = partial(learner_step_peak, with_reference=True)
micro_batch_budget = partial(micro_batch_budget, with_reference=True)

SHAPE = shape("qwen2.5-coder-1.5b")
LAYERS = SHAPE.layers  # 28


def learner(checkpointing: str, *overrides: str) -> LearnerConfig:
    """bf16 autocast over fp32 masters (issue 34's rows), from the command line as a user
    gives it, with the options those rows ran (shared prompts, no compile: the defaults before
    they became per-device)."""
    base = ["--learner.dtype", "bfloat16"]
    base += ["--learner.share_prompts", "true", "--learner.compile", "false"]
    pairs = [f"--learner.{word}" if i % 2 == 0 else word for i, word in enumerate(overrides)]
    flags = ["--learner.gradient_checkpointing", checkpointing]
    return load_config(None, base + flags + pairs).learner


@pytest.mark.parametrize(
    ("given", "parsed"), [("true", True), ("false", False), ("0", 0), ("12", 12), ("auto", "auto")]
)
def test_the_setting_parses_and_a_saved_config_reloads_it_unchanged(given, parsed):
    config = learner(given)
    assert config.gradient_checkpointing == parsed
    assert type(config.gradient_checkpointing) is type(parsed)  # True stays a bool, not 1
    saved = config.model_dump()["gradient_checkpointing"]
    assert LearnerConfig.model_validate(config.model_dump()).gradient_checkpointing == parsed
    assert saved == parsed and type(saved) is type(parsed)


@pytest.mark.parametrize("given", ["-1", "sometimes", "2.5"])
def test_a_negative_or_unknown_setting_is_refused_in_one_line_naming_the_field(given):
    with pytest.raises(ConfigError) as error:
        learner(given)
    lines = str(error.value).splitlines()
    assert lines[0] == "invalid configuration:" and len(lines) == 2
    assert lines[1].startswith("  learner.gradient_checkpointing: ")
    assert "true, false, 'auto'" in lines[1]


def test_more_layers_than_the_model_has_is_refused_in_one_line():
    with pytest.raises(CheckpointedLayersError) as error:
        checkpointed_layers(SHAPE, learner(str(LAYERS + 1)))
    assert str(error.value) == (
        "learner.gradient_checkpointing (29) is more than the model's 28 decoder layers: give "
        "at most 28, or true for all of them"
    )
    assert checkpointed_layers(SHAPE, learner(str(LAYERS))) == LAYERS


def test_the_memory_plan_refuses_more_layers_than_the_model_has():
    config = load_config(None, ["--learner.gradient_checkpointing", "29"])
    with pytest.raises(ConfigError, match=r"gradient_checkpointing \(29\) is more than"):
        plan_memory(config, SHAPE)


def test_true_false_and_the_counts_between_them():
    assert checkpointed_layers(SHAPE, learner("true")) == LAYERS
    assert checkpointed_layers(SHAPE, learner("false")) == 0
    per_token = [
        activation_bytes_per_token(SHAPE, learner("false"), checkpointed=k) for k in range(29)
    ]
    # 0 and all are the counts of false and true; each layer checkpointed before the last
    # saves the same amount (a layer's saved tensors less its input)
    assert per_token[0] == activation_bytes_per_token(SHAPE, learner("false"))
    assert per_token[LAYERS] == activation_bytes_per_token(SHAPE, learner("true"))
    steps = {per_token[k] - per_token[k + 1] for k in range(1, LAYERS - 1)}
    assert len(steps) == 1 and steps.pop() > 0
    # the first one also ends prompt sharing (its 16% is counted without checkpointing)
    assert per_token[0] - per_token[1] > per_token[1] - per_token[2]
    # the last layer is recomputed as soon as backward starts: by the count, checkpointing it
    # saves nothing (measured on CPU it saves a little: docs/benchmarks.md)
    assert per_token[LAYERS] >= per_token[LAYERS - 1]


def test_auto_checkpoints_the_fewest_layers_that_fit_the_micro_batch():
    config = learner("auto", "memory_gib", "48", "micro_batch_tokens", "8192")
    k = checkpointed_layers(SHAPE, config)
    assert 0 < k < LAYERS  # 48 GiB: neither extreme, so the test tells "fewest" from "some"

    def peak(layers: int) -> int:
        return learner_step_peak(SHAPE, config, 8192, checkpointed=layers)

    assert peak(k) <= 48 * GIB < peak(k - 1)
    fit = fit_micro_batch(SHAPE, config)
    assert fit.checkpointed == k and fit.tokens >= 8192  # the budget derived at k layers
    assert fit.tokens == micro_batch_budget(SHAPE, config, checkpointed=k)


def test_auto_checkpoints_fewer_layers_as_the_target_grows():
    chosen = [
        checkpointed_layers(SHAPE, learner("auto", "memory_gib", str(gib)))
        for gib in range(34, 90, 2)
    ]
    assert chosen == sorted(chosen, reverse=True)
    assert chosen[0] == LAYERS and chosen[-1] == 0  # the range spans both ends


def test_auto_falls_back_to_every_layer_and_a_smaller_micro_batch():
    config = learner("auto", "memory_gib", "34", "micro_batch_tokens", "8192")
    fit = fit_micro_batch(SHAPE, config)
    assert fit.checkpointed == LAYERS
    assert fit.tokens < 8192
    assert fit.tokens == micro_batch_budget(SHAPE, learner("true", "memory_gib", "34"))


def test_auto_asks_the_caller_for_the_layers_of_its_memory_terms():
    with pytest.raises(ValueError, match="pass checkpointed"):
        activation_bytes_per_token(SHAPE, learner("auto", "memory_gib", "48"))


def test_auto_without_a_memory_target_checkpoints_nothing():
    assert fit_micro_batch(SHAPE, learner("auto")).checkpointed == 0
    assert fit_micro_batch(SHAPE, learner("auto")).tokens == 8192


def test_the_memory_plan_says_how_many_layers_are_checkpointed():
    config = load_config(
        None,
        [
            "--learner.dtype", "bfloat16", "--learner.num_gpus", "1",
            "--learner.gradient_checkpointing", "auto", "--learner.memory_gib", "48",
        ],
    )  # fmt: skip
    k = checkpointed_layers(SHAPE, config.learner, with_reference=False)  # beta 0: no reference
    assert f"({k} of 28 layers checkpointed)" in plan_memory(config, SHAPE).lines[0]
