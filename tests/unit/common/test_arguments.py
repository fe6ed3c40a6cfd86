"""The tools' user mistakes end with one error line naming the flag or file and exit status 2,
before any sample is generated or run: an output path that cannot take the results, a number
out of range, a model that is not there, problems without the references asked for.

Nothing here loads a model or starts a sandbox: the stages after the checks are replaced by
stubs that fail the test if they are reached before the refusal.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from common.arguments import (
    OutputPathError,
    check_output_dir,
    check_output_file,
    non_negative_int,
    positive_float,
    positive_int,
)
from tests.conftest import REPO_ROOT


class Started(Exception):
    """A stage after the checks was reached."""


def _start(*_args, **_kwargs):
    raise Started


def _too_soon(*_args, **_kwargs):
    raise AssertionError("work started before the input was checked")


def _error_lines(capsys) -> list[str]:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return [line for line in err.splitlines() if "error" in line]


def _refused_by_argparse(main, argv: list[str], capsys) -> str:
    """The one error line of an argument argparse refuses (after its usage lines)."""
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    (line,) = _error_lines(capsys)
    return line


# ---- the shared argument types and output checks ------------------------------------------


@pytest.mark.parametrize(
    ("kind", "text", "said"),
    [
        (positive_int, "0", "must be at least 1, got 0"),
        (positive_int, "1.5", "must be a whole number, got '1.5'"),
        (non_negative_int, "-1", "must be 0 or more, got -1"),
        (positive_float, "-1", "must be a finite number above 0, got '-1'"),
        (positive_float, "0", "above 0"),
        (positive_float, "nan", "above 0"),
        (positive_float, "inf", "finite"),
        (positive_float, "x", "must be a number, got 'x'"),
    ],
)
def test_an_argument_type_names_what_it_needs(kind, text, said):
    with pytest.raises(argparse.ArgumentTypeError, match=said):
        kind(text)


def test_argument_types_take_their_values():
    assert (positive_int("3"), non_negative_int("0"), positive_float("1e-4")) == (3, 0, 1e-4)


def test_an_output_file_is_checked_before_it_is_written(tmp_path):
    (tmp_path / "a_file").write_text("x")
    assert check_output_file(tmp_path / "new" / "deeper" / "out.jsonl", "--out")  # made later
    assert check_output_file(tmp_path / "a_file", "--out")  # replaced
    with pytest.raises(OutputPathError, match=r"^--out: .* is a directory; give the path of"):
        check_output_file(tmp_path, "--out")
    with pytest.raises(OutputPathError, match=r"a_file is not a directory"):
        check_output_file(tmp_path / "a_file" / "deeper" / "out.jsonl", "--out")


def test_an_output_path_behind_a_directory_this_user_cannot_enter_is_refused(tmp_path, monkeypatch):
    """An ordinary user's ``Path.exists`` raises EACCES under another user's directory (root
    never sees it: checked by hand as the suite's ordinary user, /root/x refused in one line)."""
    locked = tmp_path / "locked"
    original = Path.exists

    def exists(path, *args, **kwargs):
        if locked in (path, *path.parents):
            raise PermissionError(13, "Permission denied", str(path))
        return original(path, *args, **kwargs)

    monkeypatch.setattr(Path, "exists", exists)
    with pytest.raises(OutputPathError, match=r"--out: cannot reach .*locked/x: Permission denied"):
        check_output_dir(locked / "x", "--out", overwrite=True)
    with pytest.raises(OutputPathError, match=r"--out: cannot reach .*locked/x: Permission denied"):
        check_output_file(locked / "x", "--out")


def test_an_output_directory_with_results_needs_overwrite(tmp_path):
    (tmp_path / "summary.json").write_text("{}")
    assert check_output_dir(tmp_path / "new", "--out", overwrite=False)
    assert check_output_dir(tmp_path, "--out", overwrite=True)
    with pytest.raises(OutputPathError, match=r"already holds summary.json: .* --overwrite"):
        check_output_dir(tmp_path, "--out", overwrite=False)
    with pytest.raises(OutputPathError, match=r"summary.json is a file; give a directory"):
        check_output_dir(tmp_path / "summary.json", "--out", overwrite=True)
    # only the named results count: another evaluation's folder beside them does not
    (tmp_path / "summary.json").unlink()
    (tmp_path / "qwen1.5b-mbpp").mkdir()
    assert check_output_dir(tmp_path, "--out", overwrite=False, results=("summary.json",))


# ---- launch.evaluate -----------------------------------------------------------------------


@pytest.fixture
def evaluate(tmp_path, monkeypatch):
    """``launch.evaluate`` with a model directory that passes ``locate_model`` and every
    later stage a stub: loading the tokenizer (the first) says it started, the engine and the
    sandbox say they started too soon."""
    from launch import evaluate as module

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # what run_evaluation sets, undone after the test
    monkeypatch.setattr(module, "load_tokenizer", _start)
    monkeypatch.setattr(module, "build_worker", _too_soon)
    monkeypatch.setattr(module, "SandboxPool", _too_soon)
    return module, ["--model", str(model), "--problems", "synthetic", "--n", "2"]


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda out: out.write_text("keep"), "is a file; give a directory"),
        (
            lambda out: out.mkdir() or (out / "summary.json").write_text("keep"),
            "already holds summary.json: give another --out, or --overwrite to write over it",
        ),
    ],
    ids=["a file", "an earlier evaluation"],
)
def test_evaluate_refuses_an_out_that_would_lose_results(tmp_path, capsys, evaluate, make, said):
    module, argv = evaluate
    out = tmp_path / "eval"
    make(out)
    assert module.main([*argv, "--out", str(out)]) == 2
    assert _error_lines(capsys) == [f"error: --out: {out} {said}"]
    assert (out if out.is_file() else out / "summary.json").read_text() == "keep"


def test_evaluate_refuses_an_out_below_a_file(tmp_path, capsys, evaluate):
    module, argv = evaluate
    (tmp_path / "a_file").write_text("")
    assert module.main([*argv, "--out", str(tmp_path / "a_file" / "eval")]) == 2
    (line,) = _error_lines(capsys)
    assert line.startswith("error: --out: cannot create") and "a_file is not a directory" in line


def test_evaluate_writes_over_an_earlier_evaluation_with_overwrite(tmp_path, evaluate):
    module, argv = evaluate
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "summary.json").write_text("{}")
    with pytest.raises(Started):  # past the check, on to the model
        module.main([*argv, "--out", str(tmp_path / "eval"), "--overwrite"])
    with pytest.raises(Started):  # an empty directory holds nothing to lose
        module.main([*argv, "--out", str(tmp_path / "empty")])


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--workers", "0"), ("--timeout-s", "-1"), ("--n", "0"), ("--kv-cache-gib", "0")],
)
def test_evaluate_refuses_a_number_out_of_range(tmp_path, capsys, evaluate, flag, value):
    module, argv = evaluate
    line = _refused_by_argparse(module.main, [*argv, flag, value], capsys)
    assert f"error: argument {flag}: must be" in line


def test_selfplay_evaluates_into_its_own_directory_again(tmp_path, monkeypatch, evaluate):
    """``launch.selfplay`` runs ``launch.evaluate`` into a round directory that already holds
    the phase's log (and, in a retried round 0, the earlier try): its command passes the check."""
    from common.config import load_config
    from launch.selfplay import __main__ as selfplay

    module, argv = evaluate
    model = argv[argv.index("--model") + 1]

    def command(name, args, log):
        assert name == "launch.evaluate"
        log.write_text("")  # _command opens the log before the evaluation starts
        module.main(args)

    monkeypatch.setattr(selfplay, "_command", command)
    config = load_config(None, ["--run.output_dir", str(tmp_path)])
    play = selfplay.SelfPlay(config, "", [], argparse.Namespace())
    out = tmp_path / "round-0" / "eval"
    out.mkdir(parents=True)
    (out / "summary.json").write_text("{}")  # the try before a crash
    with pytest.raises(Started):
        play.evaluate(model, out, held_out=True)


# ---- sandbox.check and launch.selfplay.make_repairs ------------------------------------

MBPP_ROW = {
    "task_id": 2,
    "text": "Return one.",
    "code": "def one():\n    return 1\n",
    "test_list": ["assert one() == 1"],
    "test_setup_code": "",
}


@pytest.fixture
def problems(tmp_path):
    path = tmp_path / "problems.jsonl"
    path.write_text(json.dumps(MBPP_ROW) + "\n")
    return path


@pytest.fixture
def tools(monkeypatch):
    """The two commands' modules, their sandbox pool a stub that starts nothing."""
    from launch.selfplay import make_repairs
    from sandbox import check

    monkeypatch.setattr(check, "SandboxPool", _too_soon)
    monkeypatch.setattr(make_repairs, "SandboxPool", _too_soon)
    return {"sandbox.check": check, "launch.selfplay.make_repairs": make_repairs}


def _argv(tool: str, problems, out) -> list[str]:
    extra = ["--canonical"] if tool == "sandbox.check" else []
    return ["--problems", str(problems), *extra, "--out", str(out)]


@pytest.mark.parametrize("tool", ["sandbox.check", "launch.selfplay.make_repairs"])
def test_an_out_that_is_a_directory_is_refused_before_any_sample_runs(
    tmp_path, capsys, problems, tools, tool
):
    out = tmp_path / "results"
    out.mkdir()
    assert tools[tool].main(_argv(tool, problems, out)) == 2
    assert _error_lines(capsys) == [f"error: --out: {out} is a directory; give the path of a file"]
    assert not any(out.iterdir())


@pytest.mark.parametrize("tool", ["sandbox.check", "launch.selfplay.make_repairs"])
def test_an_out_below_a_file_is_refused_before_any_sample_runs(
    tmp_path, capsys, problems, tools, tool
):
    out = problems / "results.jsonl"
    assert tools[tool].main(_argv(tool, problems, out)) == 2
    assert _error_lines(capsys) == [
        f"error: --out: cannot create {out}: {problems} is not a directory"
    ]


@pytest.mark.parametrize("tool", ["sandbox.check", "launch.selfplay.make_repairs"])
def test_an_out_in_directories_not_made_yet_is_accepted(
    tmp_path, monkeypatch, problems, tools, tool
):
    monkeypatch.setattr(tools[tool], "SandboxPool", _start)  # past the checks
    with pytest.raises(Started):
        tools[tool].main(_argv(tool, problems, tmp_path / "new" / "results.jsonl"))


def test_make_repairs_refuses_stdin_stdout_problems_in_one_line(tmp_path, capsys, tools):
    hello = REPO_ROOT.parent / "shared" / "data" / "kattis-examples" / "hello"
    argv = ["--problems", str(hello), "--split", "all", "--out", str(tmp_path / "out.jsonl")]
    assert tools["launch.selfplay.make_repairs"].main(argv) == 2
    assert _error_lines(capsys) == [
        f"error: {hello}: 1 of its 1 problems are stdin/stdout programs (hello first); repair "
        "tasks are made from function problems (unit tests)"
    ]


@pytest.mark.parametrize(
    ("tool", "flag", "value"),
    [
        ("sandbox.check", "--workers", "0"),
        ("sandbox.check", "--timeout-s", "-1"),
        ("launch.selfplay.make_repairs", "--workers", "0"),
        ("launch.selfplay.make_repairs", "--per-problem", "0"),
    ],
)
def test_a_sandbox_tool_refuses_a_number_out_of_range(
    tmp_path, capsys, problems, tools, tool, flag, value
):
    argv = [*_argv(tool, problems, tmp_path / "out.jsonl"), flag, value]
    assert f"error: argument {flag}: must be" in _refused_by_argparse(
        tools[tool].main, argv, capsys
    )


def test_check_canonical_refuses_rows_without_a_reference(tmp_path, capsys, tools):
    problems = tmp_path / "generic.jsonl"
    rows = [{"id": "g1", "prompt": "Return 1.", "tests": ["assert f() == 1"]}]
    rows.append({**rows[0], "id": "g2", "reference_solution": "def f():\n    return 1\n"})
    problems.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = tmp_path / "results.jsonl"
    assert tools["sandbox.check"].main(_argv("sandbox.check", problems, out)) == 2
    (line,) = _error_lines(capsys)
    assert line.startswith(f"error: --canonical: {problems} has no reference solution in 1 of")
    assert "task g1" in line and "--samples" in line
    assert not out.exists()


# ---- launch.verifier.train, bench.sandbox, bench.launch.push ------------------------------


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--lr", "-1"), ("--lr", "0"), ("--epochs", "0"), ("--batch-size", "0"), ("--workers", "0")],
)
def test_train_verifier_refuses_a_number_out_of_range(tmp_path, capsys, flag, value):
    from launch.verifier.train import main

    argv = ["--rollouts", str(tmp_path), "--model", str(tmp_path), "--out", str(tmp_path / "v")]
    line = _refused_by_argparse(main, [*argv, flag, value], capsys)
    assert f"error: argument {flag}: must be" in line
    assert not (tmp_path / "v").exists()


def test_train_verifier_refuses_an_out_that_is_a_file_before_training(
    tmp_path, capsys, monkeypatch
):
    from launch.verifier import train as train_verifier

    monkeypatch.setattr(train_verifier, "locate_model", _too_soon)
    out = tmp_path / "verifier"
    out.write_text("keep")
    argv = ["--rollouts", str(tmp_path), "--model", str(tmp_path), "--out", str(out)]
    assert train_verifier.main(argv) == 2
    assert _error_lines(capsys) == [f"error: --out: {out} is a file; give a directory"]
    assert out.read_text() == "keep"


@pytest.mark.parametrize(("flag", "value"), [("--workers", "0"), ("--limit", "0")])
def test_sandbox_bench_refuses_a_number_out_of_range(capsys, flag, value):
    from bench.sandbox.throughput import main

    assert f"error: argument {flag}: must be" in _refused_by_argparse(main, [flag, value], capsys)


@pytest.mark.parametrize(
    ("model", "said"),
    [
        ("missing", "is not a local directory, nor a Hugging Face hub name (owner/name)"),
        ("empty", "has no config.json: not a Hugging Face model"),
    ],
)
def test_push_bench_finds_its_model_as_the_other_tools_do(
    tmp_path, capsys, monkeypatch, model, said
):
    from bench.launch import push

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # what push sets, undone after the test
    monkeypatch.setattr(push, "measure", _too_soon)
    monkeypatch.setattr(push, "measure_through_ray", _too_soon)
    (tmp_path / "empty").mkdir()
    assert push.main(["--model", str(tmp_path / model)]) == 2
    assert _error_lines(capsys) == [f"error: --model: {tmp_path / model} {said}"]
