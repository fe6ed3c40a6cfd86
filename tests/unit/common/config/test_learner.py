"""learner.share_prompts and learner.compile default to "auto": each device gets what was
measured faster there (shared prompts on CPU, compile on CUDA), resolved in one place
(``LearnerConfig.share_prompts_on`` / ``compile_on``); true and false keep their meaning."""

from __future__ import annotations

import pytest

from common.config import ConfigError, LearnerConfig, load_config
from learner.learner import Learner
from tests.unit.learner.helpers import learner_config


@pytest.mark.parametrize("key", ["share_prompts", "compile"])
@pytest.mark.parametrize(("value", "parsed"), [("auto", "auto"), ("true", True), ("false", False)])
def test_both_switches_read_auto_true_and_false_from_the_command_line(key, value, parsed):
    assert getattr(load_config(None, [f"--learner.{key}", value]).learner, key) == parsed


def test_a_config_saved_before_auto_keeps_its_switches(tmp_path):
    path = tmp_path / "old.toml"
    path.write_text("[learner]\nshare_prompts = true\ncompile = false\n")
    learner = load_config(path).learner
    assert (learner.share_prompts, learner.compile) == (True, False)
    assert learner.share_prompts_on("cuda") and not learner.compile_on("cuda")


def test_auto_is_the_default_and_is_saved_as_such(tmp_path):
    config = load_config(None, [])
    assert (config.learner.share_prompts, config.learner.compile) == ("auto", "auto")
    path = tmp_path / "resolved.toml"
    path.write_text(config.to_toml())
    assert load_config(path).learner.compile == "auto"


def test_anything_else_is_refused_in_one_line_naming_the_field():
    with pytest.raises(ConfigError) as error:
        load_config(None, ["--learner.compile", "maybe"])
    assert str(error.value).splitlines()[1:] == [
        "  learner.compile: expected \"auto\", true or false, got 'maybe'"
    ]


@pytest.mark.parametrize(
    ("device", "shared", "compiled"), [("cpu", True, False), ("cuda", False, True)]
)
def test_auto_resolves_per_device(device, shared, compiled):
    config = LearnerConfig()
    assert config.share_prompts_on(device) is shared
    assert config.compile_on(device) is compiled


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_true_and_false_mean_the_same_on_every_device(device):
    assert LearnerConfig(compile=True).compile_on(device)
    assert not LearnerConfig(compile=False).compile_on(device)
    assert not LearnerConfig(share_prompts=False).share_prompts_on(device)
    # asked for explicitly, shared prompts hold compile's default off on CUDA too
    assert LearnerConfig(share_prompts=True).share_prompts_on(device)
    assert not LearnerConfig(share_prompts=True).compile_on(device)


def test_shared_prompts_stay_off_where_their_forward_cannot_run():
    for device in ("cpu", "cuda"):
        checkpointed = LearnerConfig(share_prompts=True, gradient_checkpointing=True)
        assert not checkpointed.share_prompts_on(device)
        assert not LearnerConfig(share_prompts=True, compile=True).share_prompts_on(device)
    # measured faster compiled under checkpointing too (3.29 against 4.14 s on the H200)
    assert LearnerConfig(gradient_checkpointing=True).compile_on("cuda")


def test_several_ranks_take_compile_auto_as_off_and_refuse_compile_true():
    ranks = {"num_ranks": 2, "num_gpus": 1}
    assert not LearnerConfig(**ranks).compile_on("cuda")
    assert not LearnerConfig(**ranks, compile="auto").compile_on("cuda")
    with pytest.raises(ValueError, match=r"learner\.compile = true is not available"):
        LearnerConfig(**ranks, compile=True)


def test_a_cpu_learner_runs_shared_prompts_uncompiled_by_default(tied_model):
    learner = Learner(tied_model, learner_config())
    assert learner.device.type == "cpu"
    assert learner.share_prompts and not learner.compiled
    assert all(layer._compiled_call_impl is None for layer in learner.model.model.layers)
    assert learner.trainer.share_prompts  # the step packs and runs what was resolved
