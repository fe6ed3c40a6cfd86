"""Bad configuration is refused before any actor starts, naming the field and the reason."""

from __future__ import annotations

import subprocess
import sys

import pytest

from common.config import Config, ConfigError, LearnerConfig, load_config
from tests.conftest import REPO_ROOT


def test_defaults_are_valid():
    config = load_config()
    assert config.rollout.prompts_per_step * config.rollout.group_size == config.rollout.batch_size


def test_unknown_key_is_refused_with_its_name():
    with pytest.raises(ConfigError, match=r"rollout\.group_sise: unknown key"):
        load_config(overrides=["--rollout.group_sise", "4"])


def test_wrong_type_is_refused_with_its_name():
    with pytest.raises(ConfigError, match=r"learner\.lr"):
        load_config(overrides=["--learner.lr", "fast"])


def test_bad_sandbox_cpu_affinity_is_refused_with_its_name():
    with pytest.raises(ConfigError, match=r"sandbox: cpu_affinity must be 'auto', 'none' or a"):
        load_config(None, ["--sandbox.cpu_affinity", "[-1]"])
    with pytest.raises(ConfigError, match=r"sandbox\.cpu_affinity"):
        load_config(None, ["--sandbox.cpu_affinity", "fastest"])
    assert load_config(None, ["--sandbox.cpu_affinity", "[1, 0]"]).sandbox.cpu_affinity == [1, 0]


def test_group_size_below_two_is_refused_with_the_reason():
    with pytest.raises(ConfigError, match=r"group_size \(1\) must be at least 2.*baseline"):
        load_config(overrides=["--rollout.group_size", "1", "--rollout.batch_size", "4"])


def test_batch_not_divisible_by_group_is_refused_with_the_reason():
    with pytest.raises(
        ConfigError, match=r"batch_size \(12\) must be a multiple of group_size \(8\)"
    ):
        load_config(overrides=["--rollout.batch_size", "12", "--rollout.group_size", "8"])


def test_lora_adapter_export_with_modules_to_save_is_refused_with_the_reason():
    lora = ["--learner.lora.enabled", "true", "--learner.lora.modules_to_save", '["model.norm"]']
    with pytest.raises(
        ConfigError, match=r"modules_to_save \(\['model\.norm'\]\) needs lora\.export = 'merged'"
    ):
        load_config(overrides=[*lora, "--learner.lora.export", "adapter"])
    assert load_config(overrides=lora).learner.lora.modules_to_save == ["model.norm"]


def test_learner_threads_during_rollout_is_refused_where_it_cannot_act():
    narrowed = ["--async.learner_threads_during_rollout", "1"]
    with pytest.raises(ConfigError, match=r"learner_threads_during_rollout needs async\.max_st"):
        load_config(overrides=[*narrowed, "--learner.num_cpus", "2"])
    with pytest.raises(ConfigError, match=r"\(1\) must be fewer than learner\.num_cpus \(1\)"):
        load_config(overrides=[*narrowed, "--async.max_staleness", "1"])
    config = load_config(
        overrides=[*narrowed, "--async.max_staleness", "1", "--learner.num_cpus", "2"]
    )
    assert config.async_.learner_threads_during_rollout == 1


def test_unknown_section_is_refused(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("[rolout]\nnum_actors = 2\n")
    with pytest.raises(ConfigError, match=r"rolout: unknown key"):
        load_config(path)


def test_invalid_toml_names_the_file(tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text("[run\nsteps = 3\n")
    with pytest.raises(ConfigError, match=r"broken\.toml: not valid TOML"):
        load_config(path)


def test_a_config_that_is_not_utf8_or_is_a_directory_is_named(tmp_path):
    path = tmp_path / "latin1.toml"
    path.write_bytes(b'[run]\nname = "caf\xe9"\n')
    with pytest.raises(ConfigError, match=r"latin1\.toml:2: not UTF-8 text"):
        load_config(path)
    with pytest.raises(ConfigError, match=r"is a directory; give the TOML file in it"):
        load_config(tmp_path)


def test_a_scalar_where_a_section_belongs_is_blamed_on_the_file(tmp_path):
    path = tmp_path / "scalar.toml"
    path.write_text("run = 5\n")
    with pytest.raises(ConfigError, match=r"'run' is not a section \(the config sets it to 5\)"):
        load_config(path, ["--run.steps", "3"])


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--learner.lr", "Infinity"),
        ("--rollout.temperature", "inf"),
        ("--sandbox.timeout_s", "nan"),
        ("--reward.terms", '{"execution": {"weight": NaN}}'),
    ],
)
def test_infinite_and_nan_numbers_are_refused(flag, value):
    with pytest.raises(ConfigError, match=r"should be a finite number"):
        load_config(None, [flag, value])


@pytest.mark.parametrize("name", ["", ".", "..", "../elsewhere", "a/../../b", "/tmp/abs"])
def test_a_run_name_must_stay_under_the_output_dir(name):
    """--overwrite deletes run.output_dir/run.name: "" or ".." would delete other runs."""
    with pytest.raises(ConfigError, match=r"run\.name: .* is not a run name"):
        load_config(None, ["--run.name", name])
    assert load_config(None, ["--run.name", "sweep/lr1"]).run.name == "sweep/lr1"


def test_completions_must_leave_room_for_a_prompt():
    with pytest.raises(ConfigError, match=r"rollout\.max_new_tokens \(512\) leaves no room"):
        load_config(None, ["--rollout.max_new_tokens", "512", "--model.max_model_len", "512"])


def test_overrides_are_typed():
    config = load_config(
        overrides=["--run.steps", "7", "--learner.lr", "0.5", "--rollout.stop", '["\\n"]']
    )
    assert config.run.steps == 7 and config.learner.lr == 0.5 and config.rollout.stop == ["\n"]


def test_resolved_config_round_trips_through_toml(tmp_path):
    config = load_config(REPO_ROOT / "configs" / "demo.toml")
    path = tmp_path / "resolved.toml"
    path.write_text(config.to_toml())
    assert load_config(path) == config


@pytest.mark.parametrize(
    "path", sorted((REPO_ROOT / "configs").glob("*.toml")), ids=lambda p: p.name
)
def test_every_shipped_config_parses(path):
    """Each config parses the way its command reads it (bench configs carry a [bench] table)."""
    if path.name.startswith("bench"):
        from bench.launch.workload import load_bench_config

        config, bench = load_bench_config(str(path), [])
        assert bench["steps"] > bench["warmup"]
    else:
        config = load_config(path)
    assert isinstance(config, Config)


def test_cli_refuses_bad_config_without_a_traceback(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("[rollout]\nbatch_size = 10\ngroup_size = 4\n")
    proc = subprocess.run(
        [sys.executable, "-m", "launch.train", "--config", str(path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "rollout: batch_size (10) must be a multiple of group_size (4)" in proc.stderr
    assert "Traceback" not in proc.stderr


def _keys(model, prefix: str = ""):
    from pydantic import BaseModel

    for attribute, field in model.model_fields.items():
        name = field.alias or attribute  # the key users write ("async", not "async_")
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            yield from _keys(field.annotation, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}"


def test_reference_documents_every_config_key():
    reference = (REPO_ROOT / "docs" / "configuration.md").read_text()
    missing = [key for key in _keys(Config) if f"`{key}`" not in reference]
    assert not missing, f"docs/configuration.md lacks {missing}"


def test_the_kalman_baseline_refuses_batch_std():
    kalman = ["--algorithm.advantage.baseline", "kalman", "--algorithm.advantage.scale"]
    with pytest.raises(ConfigError, match="batch_std' is not defined for the Kalman baseline"):
        load_config(None, [*kalman, "batch_std"])


def test_the_math_is_set_under_algorithm_and_its_old_keys_are_refused_naming_the_new_ones(
    tmp_path,
):
    config = load_config(None, ["--algorithm.loss.beta", "0.1", "--algorithm.advantage.eps", "0.5"])
    assert (config.algorithm.loss.beta, config.algorithm.advantage.eps) == (0.1, 0.5)
    with pytest.raises(
        ConfigError,
        match=r"learner\.clip_eps_low: unknown key; it is algorithm\.loss\.clip_eps_low now",
    ):
        load_config(None, ["--learner.clip_eps_low", "0.1"])
    path = tmp_path / "old.toml"
    path.write_text("[advantage]\ntie_noise = 0.05\n\n[learner]\nbeta = 0.04\n")
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    assert str(refused.value).splitlines()[1:] == [
        "  learner.beta: unknown key; it is algorithm.loss.beta now",
        "  advantage: unknown key; it is algorithm.advantage now",
    ]
    with pytest.raises(ConfigError, match=r"learner\.lr_typo: unknown key \(check the spelling"):
        load_config(None, ["--learner.lr_typo", "1"])


def test_the_sandbox_stops_early_only_when_every_execution_term_is_binary():
    binary = {"mode": "binary"}
    assert not load_config(None, []).reward.stops_at_first_failure()
    assert load_config(
        None, ["--reward.terms.execution.options", '{"mode": "binary"}']
    ).reward.stops_at_first_failure()
    both = Config.model_validate(
        {
            "reward": {
                "terms": {
                    "execution": {"options": binary},
                    "partial": {"kind": "execution", "options": {"mode": "partial"}},
                }
            }
        }
    )
    assert not both.reward.stops_at_first_failure()
    only_format = Config.model_validate({"reward": {"terms": {"format": {}}}})
    assert not only_format.reward.stops_at_first_failure()


def test_learner_ranks_and_the_collective_transport_are_refused_where_they_cannot_work():
    with pytest.raises(ConfigError, match="needs num_cpus or num_gpus per rank"):
        load_config(None, ["--learner.num_ranks", "2", "--learner.num_cpus", "0"])
    with pytest.raises(ConfigError, match="'precomputed' is not implemented"):
        load_config(None, ["--learner.num_ranks", "2", "--learner.reference", "precomputed"])
    with pytest.raises(ConfigError, match=r"needs async\.max_staleness = 0"):
        load_config(None, ["--weights.transport", "collective", "--async.max_staleness", "1"])


def test_requested_cpus_counts_every_actor():
    config = load_config(
        None,
        ["--learner.num_ranks", "2", "--learner.num_cpus", "1.5", "--rollout.num_actors", "3",
         "--rollout.num_cpus", "0.5", "--sandbox.num_cpus", "1"],
    )  # fmt: skip
    assert config.requested_cpus == 2 * 1.5 + 3 * 0.5 + 1


def test_learner_keys_are_saved_in_their_old_order_every_key_once():
    """[learner]'s keys are grouped by role in the schema (optimiser, speed, resources), but a
    resolved config lists them in one fixed order, so saved configs stay comparable."""
    from common.config.learner import _SAVED_ORDER

    assert sorted(_SAVED_ORDER) == sorted(LearnerConfig.model_fields)
    assert list(LearnerConfig().model_dump()) == list(_SAVED_ORDER)
