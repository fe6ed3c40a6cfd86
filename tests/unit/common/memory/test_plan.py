"""The memory plan (common/memory/plan.py): the shipped one-GPU configs fit their cards by
its arithmetic, an impossible colocated config is refused in one line with the numbers and what
to change (exit status 2 through launch.train), and CPU runs have no plan."""

from __future__ import annotations

import logging
import re
import shutil

import pytest

from common.config import ConfigError, load_config
from common.memory.fit import MAX_MICRO_BATCH_TOKENS, fit_micro_batch
from common.memory.plan import (
    check_memory_plan,
    fit_table,
    learner_fit,
    plan_memory,
    read_shape,
)
from launch.train import main
from tests.conftest import REPO_ROOT
from tests.unit.public_models import CONFIGS, shape

ONE_GPU = {
    "qwen2.5-coder-1.5b-mbpp-1gpu.toml": ("qwen2.5-coder-1.5b", 80),
    "qwen2.5-coder-1.5b-mbpp-24gb.toml": ("qwen2.5-coder-1.5b", 22),
    "qwen2.5-coder-0.5b-lora-mbpp-1gpu.toml": ("qwen2.5-coder-0.5b", 10),
}


@pytest.mark.parametrize("name", sorted(ONE_GPU))
def test_the_shipped_one_gpu_configs_fit_their_cards(name):
    model, card = ONE_GPU[name]
    config = load_config(REPO_ROOT / "configs" / name)
    assert config.rollout.colocate and 0 < config.ray.gpu_memory_gib <= card
    plan = plan_memory(config, shape(model))
    assert plan.refusal is None and not plan.warnings
    assert plan.lines[-1].endswith("GiB: fits")


def test_a_full_fine_tune_of_1_5b_colocated_on_10_gib_is_refused_in_one_line():
    config = load_config(
        REPO_ROOT / "configs" / "qwen2.5-coder-1.5b-mbpp-1gpu.toml",
        ["--ray.gpu_memory_gib", "10", "--learner.memory_gib", "0"],
    )
    refusal = plan_memory(config, shape("qwen2.5-coder-1.5b")).refusal
    assert refusal is not None and "\n" not in refusal
    assert "rollout.colocate needs 43.9 GiB on a 10 GiB card (ray.gpu_memory_gib)" in refusal
    assert "learner step 35.0 + sleeping engine 1.5" in refusal
    assert "learner.lora.enabled = true" in refusal  # the weights leave the KV cache no room


def test_an_engine_that_peaks_is_told_the_kv_cache_that_fits():
    config = load_config(
        REPO_ROOT / "configs" / "qwen2.5-coder-0.5b-lora-mbpp-1gpu.toml",
        ["--rollout.kv_cache_gib", "12"],
    )
    refusal = plan_memory(config, shape("qwen2.5-coder-0.5b")).refusal
    assert refusal is not None
    assert "rollout.kv_cache_gib <= 4.6 (now 12)" in refusal


def test_an_unknown_card_is_printed_but_not_enforced():
    config = load_config(
        REPO_ROOT / "configs" / "qwen2.5-coder-1.5b-mbpp-1gpu.toml",
        ["--ray.gpu_memory_gib", "0", "--learner.memory_gib", "0"],
    )
    plan = plan_memory(config, shape("qwen2.5-7b"))
    assert plan.refusal is None
    assert "not enforced: ray.gpu_memory_gib = 0" in plan.lines[-1]


def test_a_learner_on_its_own_gpu_that_exceeds_the_card_is_a_warning():
    config = load_config(
        REPO_ROOT / "configs" / "qwen2.5-coder-1.5b-mbpp.toml", ["--ray.gpu_memory_gib", "23.6"]
    )
    plan = plan_memory(config, shape("qwen2.5-coder-1.5b"))
    assert plan.refusal is None
    assert ["learner step" in w and "23.6 GiB card" in w for w in plan.warnings] == [True]


def test_cpu_runs_have_no_plan(caplog):
    with caplog.at_level(logging.INFO, logger="common.memory.plan"):
        check_memory_plan(load_config(None, []), "/nonexistent/model")
    assert not caplog.records


def test_read_shape_takes_a_directory_or_its_config_json(tmp_path):
    shutil.copy(CONFIGS / "qwen2.5-7b.json", tmp_path / "config.json")
    assert read_shape(str(tmp_path)) == read_shape(str(tmp_path / "config.json"))
    assert read_shape(str(tmp_path)).vocab == 152064


def test_launch_train_exits_2_on_a_refused_plan(tmp_path, capsys):
    model = tmp_path / "model"
    model.mkdir()
    shutil.copy(CONFIGS / "qwen2.5-coder-1.5b.json", model / "config.json")
    argv = ["--config", str(REPO_ROOT / "configs" / "qwen2.5-coder-1.5b-mbpp-1gpu.toml"),
            "--model.path", str(model), "--ray.gpu_memory_gib", "10",
            "--run.output_dir", str(tmp_path / "runs")]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: memory plan: rollout.colocate needs") and err.count("\n") == 1
    assert not (tmp_path / "runs").exists()


def test_the_table_says_the_users_40_gb_card_holds_1_5b_with_a_reference():
    """By the arithmetic since the LM head's function and the metric entropy's fix (issue 34;
    the H200 measured 1b02179's learner at 42.5 GiB with gradient checkpointing)."""
    rows = {
        tuple(cell.strip() for cell in row.split("|")[1:4]): row
        for row in fit_table().splitlines()[2:]
    }
    assert len(rows) == 18
    assert rows[("Qwen2.5-Coder-1.5B", "full", "yes")].rstrip(" |").split("|")[-3].strip() == "both"
    assert rows[("Qwen2.5-7B", "LoRA r16", "yes")].split("|")[-2].strip() == "both"


def test_the_table_says_a_24_gb_card_holds_1_5b_with_a_reference_only_with_the_state_on_the_host():
    """Issue 54: 22 GiB of a 24 GB card hold the 1.5B full fine-tune with a reference and an
    engine beside it when the master weights and AdamW live in host memory, not without."""
    lines = fit_table().splitlines()
    assert lines[0].split("|")[5].strip() == "24 GB"
    rows = {tuple(cell.strip() for cell in row.split("|")[1:4]): row for row in lines[2:]}

    def on_24_gb(training: str) -> str:
        return rows[("Qwen2.5-Coder-1.5B", training, "yes")].split("|")[5].strip()

    assert (on_24_gb("full, state on host"), on_24_gb("full")) == ("both", "no")


def test_the_plan_prints_the_host_memory_the_state_takes():
    config = load_config(REPO_ROOT / "configs" / "qwen2.5-coder-1.5b-mbpp-24gb.toml")
    assert config.learner.offload_optimizer == "step" and config.learner.optimizer == "adamw"
    line = plan_memory(config, shape("qwen2.5-coder-1.5b")).lines[0]
    assert "AdamW 0.0" in line and "in host memory 23.0 GiB (master weights" in line


def test_config_errors_come_back_as_config_errors(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"model\.path: cannot read the model's shape"):
        read_shape(str(tmp_path))


def test_the_ipc_transport_counts_the_copy_each_rank_keeps_for_its_engine():
    path = REPO_ROOT / "configs" / "qwen2.5-coder-1.5b-mbpp-1gpu.toml"
    model = shape("qwen2.5-coder-1.5b")
    ipc = load_config(path, ["--learner.memory_gib", "0"])
    assert ipc.weights.transport == "ipc"  # the default when colocated on a GPU
    store = load_config(path, ["--learner.memory_gib", "0", "--weights.transport", "collective"])
    with_copy, without = plan_memory(ipc, model), plan_memory(store, model)
    assert "IPC export copy 2.9" in with_copy.lines[0]  # the whole model in bf16: 2 B x 1.54B
    assert "IPC export copy" not in without.lines[0]

    def between(plan) -> float:  # the card line's "learner between steps N)"
        return float(re.search(r"learner between steps ([0-9.]+)\)", plan.lines[-1])[1])

    assert between(with_copy) - between(without) == pytest.approx(2.9, abs=0.051)


def test_a_cpu_run_whose_memory_target_cannot_hold_a_micro_batch_is_refused_on_the_driver(
    tmp_path,
):
    shutil.copy(CONFIGS / "qwen2.5-coder-1.5b.json", tmp_path / "config.json")
    config = load_config(None, ["--learner.memory_gib", "1"])  # a CPU run: no GPUs asked for
    with pytest.raises(ConfigError, match=r"learner\.memory_gib \(1\) cannot hold"):
        check_memory_plan(config, str(tmp_path))
    check_memory_plan(load_config(None, []), str(tmp_path))  # no target: nothing to check


@pytest.mark.parametrize("gpus", [0, 1])
@pytest.mark.parametrize("checkpointing", ["true", "20", "auto"])
def test_a_memory_target_shorter_than_one_sequence_is_refused_with_advice_that_holds_one(
    tmp_path, gpus, checkpointing
):
    """A sequence longer than the derived budget would run alone past the target: refused on
    the driver (CPU and GPU runs), with advice that, taken, passes the same check; and the
    driver's budget is the learner's own (its reference dtype resolved on its device)."""
    shutil.copy(CONFIGS / "qwen2.5-coder-1.5b.json", tmp_path / "config.json")
    flags = ["--learner.num_gpus", str(gpus), "--learner.dtype", "bfloat16"]
    flags += ["--algorithm.loss.beta", "0.04", "--learner.gradient_checkpointing", checkpointing]
    flags += ["--model.max_model_len", "32768"]
    # under one 32k sequence, over the state: a CPU learner's fp32 reference and eager
    # activations need more than a compiled CUDA one's
    target = 34 if gpus else 40
    config = load_config(None, [*flags, "--learner.memory_gib", str(target)])
    with pytest.raises(ConfigError) as refused:
        check_memory_plan(config, str(tmp_path))
    message = str(refused.value)
    assert message.startswith(f"learner.memory_gib ({target}) gives micro-batches of ")
    assert "fewer than one sequence of model.max_model_len (32768)" in message
    advice = re.search(
        r"give learner\.memory_gib >= ([0-9.]+)( with learner\.micro_batch_tokens >= 32768)?,",
        message,
    )
    assert advice and target < float(advice[1]) < 140, message
    # "auto" checkpoints for micro_batch_tokens, so its advice raises that too
    assert bool(advice[2]) == (checkpointing == "auto"), message
    taken = [*flags, "--learner.memory_gib", advice[1]]
    if advice[2]:
        taken += ["--learner.micro_batch_tokens", "32768"]
    check_memory_plan(load_config(None, taken), str(tmp_path))
    device = "cuda" if gpus else "cpu"
    learner = load_config(None, taken).learner
    driver = learner_fit(load_config(None, taken), shape("qwen2.5-coder-1.5b"))
    own = fit_micro_batch(
        shape("qwen2.5-coder-1.5b"),
        learner,
        device=device,
        with_reference=True,  # beta 0.04
    )
    assert driver == own and own.tokens >= 32768


def test_a_sequence_longer_than_any_budget_is_not_refused_for_it(tmp_path):
    """The budget stops at MAX_MICRO_BATCH_TOKENS: a longer model.max_model_len runs alone
    whatever the target, so only that ceiling is asked of it."""
    shutil.copy(CONFIGS / "qwen2.5-coder-1.5b.json", tmp_path / "config.json")
    flags = ["--learner.dtype", "bfloat16", "--learner.gradient_checkpointing", "true"]
    flags += ["--model.max_model_len", str(2 * MAX_MICRO_BATCH_TOKENS)]
    check_memory_plan(load_config(None, [*flags, "--learner.memory_gib", "1000"]), str(tmp_path))


def test_launch_train_exits_2_when_the_target_cannot_hold_one_sequence(tmp_path, capsys):
    """The same refusal through the command a user types, before anything starts."""
    model = tmp_path / "model"
    model.mkdir()
    shutil.copy(CONFIGS / "qwen2.5-coder-1.5b.json", model / "config.json")
    defaults = tmp_path / "defaults.toml"  # every key at its default
    defaults.write_text("")
    argv = ["--config", str(defaults), "--model.path", str(model), "--learner.dtype", "bfloat16",
            "--learner.memory_gib", "40", "--model.max_model_len", "32768",
            "--run.output_dir", str(tmp_path / "runs")]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: learner.memory_gib (40) gives micro-batches of ")
    assert err.count("\n") == 1 and "give learner.memory_gib >= " in err
    assert not (tmp_path / "runs").exists()
