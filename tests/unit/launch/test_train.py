"""User mistakes end the commands with one line naming what is wrong and exit status 2, before
any actor starts and before a run directory is written."""

from __future__ import annotations

import os

import pytest

from tests.conftest import REPO_ROOT

MBPP = REPO_ROOT.parent / "shared" / "data" / "mbpp.jsonl"


@pytest.fixture
def empty_hub_cache(tmp_path, monkeypatch):
    """No model in the Hugging Face cache, and the hub off (as on CI and in launch's default)."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _train(capsys, *args: str) -> tuple[int, list[str]]:
    from launch.train import main

    status = main(list(args))
    return status, capsys.readouterr().err.strip().splitlines()


def test_a_shipped_gpu_config_without_its_model_says_how_to_get_it(
    tmp_path, capsys, empty_hub_cache
):
    config = str(REPO_ROOT / "configs" / "qwen2.5-coder-1.5b-mbpp.toml")
    status, lines = _train(capsys, "--config", config, "--run.output_dir", str(tmp_path))
    assert status == 2 and len(lines) == 1
    assert lines[0].startswith("error: model.path: Qwen/Qwen2.5-Coder-1.5B-Instruct is neither")
    assert "hf download Qwen/Qwen2.5-Coder-1.5B-Instruct" in lines[0]
    assert not (tmp_path / "qwen2.5-coder-1.5b-mbpp").exists()


def test_no_config_is_refused_in_one_line(tmp_path, capsys):
    """The defaults alone train at reward 0 (no stop string, 512 new tokens for a random
    model): a run without --config is refused, not started."""
    status, lines = _train(capsys, "--run.output_dir", str(tmp_path), "--run.steps", "2")
    assert status == 2 and len(lines) == 1
    assert lines[0].startswith("error: --config: name a config file, e.g. --config configs/demo")
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("path", "said"),
    [
        ("/nonexistent/model", "is not a local directory, nor a Hugging Face hub name"),
        (str(REPO_ROOT / "README.md"), "is a file; give the model's directory"),
        (str(REPO_ROOT), "has no config.json"),
    ],
)
def test_a_model_path_that_is_no_model_is_refused(tmp_path, capsys, path, said):
    demo = str(REPO_ROOT / "configs" / "demo.toml")
    status, lines = _train(
        capsys, "--config", demo, "--model.path", path, "--run.output_dir", str(tmp_path)
    )
    assert status == 2 and len(lines) == 1 and said in lines[0]


def test_a_malformed_problems_file_names_its_line(tmp_path, capsys, tiny_model_path):
    problems = tmp_path / "problems.jsonl"
    good = MBPP.read_text().splitlines()[0] if MBPP.is_file() else "{}"
    problems.write_text(good + "\n" + '{"task_id": 2, "text": "x"\n')
    demo = str(REPO_ROOT / "configs" / "demo.toml")
    status, lines = _train(
        capsys,
        "--config", demo,
        "--model.path", tiny_model_path,
        "--data.source", str(problems),
        "--data.split", "all",
        "--run.output_dir", str(tmp_path / "runs"),
    )  # fmt: skip
    assert status == 2 and len(lines) == 1
    assert lines[0].startswith(f"error: {problems}:")
    assert not (tmp_path / "runs" / "demo").exists()


def test_a_missing_problems_file_is_named(tmp_path, capsys, tiny_model_path):
    demo = str(REPO_ROOT / "configs" / "demo.toml")
    missing = tmp_path / "missing.jsonl"
    status, lines = _train(
        capsys,
        "--config", demo,
        "--model.path", tiny_model_path,
        "--data.source", str(missing),
        "--run.output_dir", str(tmp_path / "runs"),
    )  # fmt: skip
    assert (status, lines) == (2, [f"error: problems file {missing} does not exist"])


def test_evaluate_without_its_model_says_how_to_get_it(tmp_path, capsys, empty_hub_cache):
    from launch.evaluate import main

    args = ["--model", "Qwen/Qwen2.5-Coder-0.5B", "--problems", str(MBPP), "--n", "2"]
    assert main([*args, "--out", str(tmp_path / "eval")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --model: Qwen/Qwen2.5-Coder-0.5B is")


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ["--learner.lora.enabled", "true"],
            "error: learner.lora: launch.selfplay starts each",
        ),
        (["--rollout.batch_siz", "8"], "rollout.batch_siz: unknown key"),
        (["--data.source", "/nonexistent/problems.jsonl"], "/nonexistent/problems.jsonl"),
    ],
)
def test_selfplay_refuses_what_it_cannot_run(tmp_path, capsys, args, said):
    from launch.selfplay.__main__ import main

    demo = str(REPO_ROOT / "configs" / "demo.toml")
    status = main(["--config", demo, "--rounds", "1", "--run.output_dir", str(tmp_path), *args])
    lines = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and said in "\n".join(lines)
    assert not any(tmp_path.iterdir()), "nothing written"


def test_saboteur_settings_that_cannot_work_are_refused():
    from common.config import ConfigError, validate_config

    for data, said in [
        ({"selfplay": {"saboteur": True, "saboteur_prompts": 8}}, "must be fewer than"),
        (
            {"selfplay": {"saboteur": True}, "algorithm": {"advantage": {"baseline": "kalman"}}},
            "group_mean",
        ),
        ({"selfplay": {"saboteur": True}, "episode": {"max_turns": 2}}, "do not combine"),
    ]:
        with pytest.raises(ConfigError, match=said):
            validate_config(data)


def test_a_saboteur_without_reference_programs_is_refused(tmp_path, capsys, tiny_model_path):
    problems = tmp_path / "problems.jsonl"
    problems.write_text('{"id": "a", "prompt": "Write f.", "tests": ["assert f() == 1"]}\n')
    status, lines = _train(
        capsys,
        "--config", str(REPO_ROOT / "configs" / "demo.toml"),
        "--model.path", tiny_model_path,
        "--data.source", str(problems),
        "--data.split", "all",
        "--selfplay.saboteur", "true",
        "--run.output_dir", str(tmp_path / "runs"),
    )  # fmt: skip
    assert status == 2 and len(lines) == 1
    assert "selfplay.saboteur: no problem of" in lines[0] and "reference solution" in lines[0]
    assert not (tmp_path / "runs").exists()


def test_resuming_with_another_learner_rank_count_is_refused(tmp_path, capsys, tiny_model_path):
    """A checkpoint written by two learner ranks (its optimiser a distributed checkpoint)
    resumed with one: refused up front, before any actor starts."""
    from common.config import load_config

    config = load_config(
        REPO_ROOT / "configs" / "demo.toml",
        ["--model.path", tiny_model_path, "--run.output_dir", str(tmp_path), "--learner.num_ranks",
         "2", "--learner.num_cpus", "0.5"],
    )  # fmt: skip
    checkpoint = config.run_dir / "checkpoints" / "step-0000002"
    (checkpoint / "optimizer").mkdir(parents=True)
    (config.run_dir / "config.toml").write_text(config.to_toml())
    (checkpoint / "driver_state.json").write_text(
        '{"step": 2, "weight_version": 2, "seed": 0, "curriculum": {}}'
    )
    status, lines = _train(capsys, "--resume", str(config.run_dir), "--learner.num_ranks", "1")
    assert status == 2 and len(lines) == 1
    assert "written by several learner ranks" in lines[0]


def _resumable(tmp_path, tiny_model_path):
    """A run directory with a checkpoint at step 2 (no actor needed to refuse it)."""
    from common.config import load_config

    config = load_config(
        REPO_ROOT / "configs" / "demo.toml",
        ["--model.path", tiny_model_path, "--run.output_dir", str(tmp_path)],
    )
    checkpoint = config.run_dir / "checkpoints" / "step-0000002"
    checkpoint.mkdir(parents=True)
    (config.run_dir / "config.toml").write_text(config.to_toml())
    (checkpoint / "driver_state.json").write_text(
        '{"step": 2, "weight_version": 2, "seed": 0, "curriculum": {}}'
    )
    return config.run_dir


def test_a_run_directory_in_use_is_refused(tmp_path, capsys, tiny_model_path):
    from launch.train import run_lock

    run_dir = _resumable(tmp_path, tiny_model_path)
    with run_lock(run_dir):  # as the run's own driver holds it
        status, lines = _train(capsys, "--resume", str(run_dir))
    assert status == 2 and len(lines) == 1
    assert f"{run_dir} is in use by another run" in lines[0] and f"pid {os.getpid()}" in lines[0]


def test_a_metrics_log_corrupt_before_its_last_line_is_named(tmp_path, capsys, tiny_model_path):
    run_dir = _resumable(tmp_path, tiny_model_path)
    (run_dir / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2, "rew\n{"step": 3}\n')
    status, lines = _train(capsys, "--resume", str(run_dir))
    assert status == 2 and len(lines) == 1
    assert f"{run_dir / 'metrics.jsonl'}:2: not a JSON row" in lines[0]


def _demo_with(tmp_path, tiny_model_path, *args: str) -> list[str]:
    """The demo config on the tiny model, writing under ``tmp_path/runs``, plus ``args``."""
    demo = str(REPO_ROOT / "configs" / "demo.toml")
    return ["--config", demo, "--model.path", tiny_model_path,
            "--run.output_dir", str(tmp_path / "runs"), *args]  # fmt: skip


def _mbpp_rows(tmp_path, count: int) -> str:
    """The first ``count`` MBPP rows (task ids 1.., the "prompt" split) as a problems file."""
    path = tmp_path / "mbpp.jsonl"
    path.write_text("\n".join(MBPP.read_text().splitlines()[:count]) + "\n")
    return str(path)


@pytest.mark.skipif(not MBPP.is_file(), reason="needs ../shared/data/mbpp.jsonl beside the repo")
def test_prompts_the_engines_refuse_are_refused_before_they_start(
    tmp_path, capsys, tiny_model_path
):
    """A prompt of model.max_model_len tokens or more: vLLM would refuse it minutes in, after
    the cluster and the engines started (MBPP's are 270-374 tiny-tokenizer tokens)."""
    source = _mbpp_rows(tmp_path, 10)
    args = _demo_with(tmp_path, tiny_model_path, "--data.source", source, "--data.split", "all")
    status, lines = _train(capsys, *args, "--rollout.max_new_tokens", "4")
    assert status == 2 and len(lines) == 1
    assert lines[0].startswith(
        f"error: data.source: 10 of 10 prompts of {source} are model.max_model_len (128) "
        "tokens or longer, which the engines refuse; the longest 374 (problem 7): give "
        "model.max_model_len >= 378"
    )
    assert not (tmp_path / "runs" / "demo").exists()


@pytest.mark.skipif(not MBPP.is_file(), reason="needs ../shared/data/mbpp.jsonl beside the repo")
def test_prompts_that_leave_less_than_max_new_tokens_are_only_warned_of(
    tmp_path, tiny_model_path, caplog
):
    """vLLM ends their completions at the context; the run goes on."""
    from transformers import AutoTokenizer

    from common.config import load_config
    from launch.data.problems import load_problems
    from launch.train import check_problems

    source = _mbpp_rows(tmp_path, 10)
    flags = ["--data.source", source, "--data.split", "all", "--model.max_model_len", "380"]
    config = load_config(None, [*flags, "--rollout.max_new_tokens", "64"])
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    with caplog.at_level("WARNING", logger="launch.train"):
        checked = check_problems(config, tokenizer, load_problems(config.data, tokenizer))
    assert checked.held_out == [] and len(checked.prompt_ids) == len(checked.train) == 10
    assert (
        "prompts of" in caplog.text and "leave less than rollout.max_new_tokens (64)" in caplog.text
    )


@pytest.mark.skipif(not MBPP.is_file(), reason="needs ../shared/data/mbpp.jsonl beside the repo")
@pytest.mark.parametrize("section", ["data", "eval"])
def test_a_split_with_no_problems_is_refused_before_the_engines(
    tmp_path, capsys, tiny_model_path, section
):
    source = _mbpp_rows(tmp_path, 3)  # task ids 1-3: MBPP's "prompt" split, none in "train"
    flags = [f"--{section}.source", source, f"--{section}.split", "train"]
    if section == "eval":
        flags += ["--eval.every", "1"]
    status, lines = _train(capsys, *_demo_with(tmp_path, tiny_model_path, *flags))
    assert status == 2 and len(lines) == 1
    assert lines[0] == (
        f"error: {section}.source / {section}.split: {source} has no problem in split 'train'"
    )


def test_an_output_dir_that_is_a_file_is_named(tmp_path, capsys, tiny_model_path):
    (tmp_path / "runs").write_text("not a directory")
    status, lines = _train(capsys, *_demo_with(tmp_path, tiny_model_path))
    runs = tmp_path / "runs"
    assert status == 2 and lines == [
        f"error: run.output_dir: cannot create {runs / 'demo'}: {runs} is not a directory"
    ]


def test_a_metrics_row_without_a_step_is_named_on_resume(tmp_path, capsys, tiny_model_path):
    run_dir = _resumable(tmp_path, tiny_model_path)
    (run_dir / "metrics.jsonl").write_text('{"step": 1}\n{"reward": 0.5}\n')
    status, lines = _train(capsys, "--resume", str(run_dir))
    assert status == 2 and len(lines) == 1
    assert lines[0].endswith("metrics.jsonl: row 2 has no integer 'step': not this run's record")


def test_a_moved_run_resumes_where_it_now_is(tmp_path, capsys, tiny_model_path):
    """Copied under another name elsewhere, the run is the --resume directory (its saved
    run.output_dir and run.name are where it was): the copy's own records are the ones read."""
    import shutil

    moved = tmp_path / "elsewhere" / "copy"
    shutil.copytree(_resumable(tmp_path, tiny_model_path), moved)
    (moved / "metrics.jsonl").write_text('{"reward": 0.5}\n')  # refused on reading it
    status, lines = _train(capsys, "--resume", str(moved))
    assert status == 2 and lines[0].startswith(f"error: {moved / 'metrics.jsonl'}: row 1 has")


@pytest.mark.parametrize("how", ["--resume", "--overwrite"])
def test_a_ray_address_where_nothing_answers_changes_nothing_in_the_run(
    tmp_path, tiny_model_path, how
):
    """Refused in one line before the run directory is touched: a resume keeps its saved
    config (a later plain --resume would reuse the bad address), an --overwrite its old run.
    A process of its own: this one's Ray, if started, would be joined instead."""
    import subprocess
    import sys

    run_dir = _resumable(tmp_path, tiny_model_path)
    (run_dir / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n')

    def files() -> dict:  # the lock aside: taken, and released, by every launch.train
        return {
            p.name: p.read_bytes() if p.is_file() else sorted(p.rglob("*"))
            for p in run_dir.iterdir()
            if p.name != "run.lock"
        }

    before = files()
    demo = ["--config", str(REPO_ROOT / "configs" / "demo.toml"), "--model.path",
            tiny_model_path, "--run.output_dir", str(tmp_path)]  # fmt: skip
    args = ["--resume", str(run_dir)] if how == "--resume" else [*demo, "--overwrite"]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    result = subprocess.run(
        [sys.executable, "-m", "launch.train", *args, "--ray.address", "127.0.0.1:1"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    errors = [line for line in result.stderr.splitlines() if line.startswith("error")]
    assert result.returncode == 2, result.stderr[-2000:]
    assert errors == [
        "error: ray.address: nothing answers at 127.0.0.1:1 (Connection refused): start the "
        "head there (ray start --head), or give its address"
    ]
    assert files() == before


def test_selfplay_overwrite_deletes_nothing_when_the_model_is_wrong(tmp_path, capsys):
    from launch.selfplay.__main__ import main

    earlier = tmp_path / "demo" / "round-1"
    earlier.mkdir(parents=True)
    demo = str(REPO_ROOT / "configs" / "demo.toml")
    status = main(["--config", demo, "--rounds", "1", "--overwrite", "--run.output_dir",
                   str(tmp_path), "--model.path", "/nonexistent/model"])  # fmt: skip
    lines = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(lines) == 1 and lines[0].startswith("error: model.path:")
    assert earlier.is_dir()


@pytest.mark.parametrize(
    ("breakage", "said"),
    [
        ("no_tokenizer", "has no tokenizer files"),
        ("garbage_weights", "model.safetensors is not a safetensors file"),
        ("unknown_type", "The checkpoint you are trying to load has model type"),
    ],
)
def test_a_model_directory_the_engines_would_fail_on_is_refused(
    tmp_path, capsys, tiny_model_path, breakage, said
):
    import shutil

    model = tmp_path / "model"
    shutil.copytree(tiny_model_path, model)
    if breakage == "no_tokenizer":
        (model / "tokenizer.json").unlink()
    elif breakage == "garbage_weights":
        (model / "model.safetensors").write_bytes(b"not a safetensors header")
    else:
        config = (model / "config.json").read_text()
        (model / "config.json").write_text(config.replace('"qwen2"', '"no_such_model"'))
    status, lines = _train(capsys, *_demo_with(tmp_path, str(model)))
    assert status == 2 and len(lines) == 1
    assert lines[0].startswith("error: model.path: ") and said in lines[0]
    assert not (tmp_path / "runs" / "demo").exists()


def test_a_scorer_model_that_is_no_model_is_refused(tmp_path, capsys, tiny_model_path):
    terms = (
        '{"execution": {"weight": 1.0}, "judge": {"kind": "scorer", "weight": 0.1, '
        f'"options": {{"path": "{tmp_path / "missing"}"}}}}}}'
    )
    status, lines = _train(capsys, *_demo_with(tmp_path, tiny_model_path, "--reward.terms", terms))
    assert status == 2 and len(lines) == 1
    assert lines[0].startswith("error: reward.terms.judge.options.path: ")
