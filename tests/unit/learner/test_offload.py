"""learner.offload_optimizer = "step": one learner rank inside FSDP2's CPU offload, its fp32
master weights, gradients and AdamW state in host memory for the whole run. On CPU both paths
run: the offloaded update equals the on-device one within the tolerance measured below, the
state is where the option says, a checkpoint resumes with either setting, and the combinations
it does not carry are refused in one line."""

from __future__ import annotations

import gc
import re

import pytest
import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from common.config import ConfigError, LearnerConfig, LoraConfig, LossConfig, load_config
from learner.learner import Learner
from tests.unit.learner.helpers import tiny_samples

# AdamW divides each element's update by its gradient's magnitude plus eps: with a tiny eps an
# element whose gradient is rounding noise moves by +-lr on the noise's sign. eps = 1e-4 bounds
# that amplification (as tests/unit/learner/test_sharding.py does), so what is compared is the
# update, not the sign of noise.
_BASE = {"lr": 1e-3, "micro_batch_tokens": 24, "num_cpus": 1, "adam_eps": 1e-4}
#: a KL term in every step, so the frozen reference is built and used
KL = LossConfig(beta=0.05)

# Not bit for bit on CPU: the same float ops but for two orders of summation. The LM head runs
# through its module under FSDP2 (learner/lm_head.py head_is_plain) and through the function
# that writes its gradient in place without it; and FSDP2 sums a micro-batch's two gradients of
# the tied embedding before it adds them to the accumulated one, where autograd adds each to it.
# Measured (2026-12-06, this CPU machine, torch 2.13): 10 seeds x {full, LoRA, 2 epochs x 2
# mini-batches, a checkpointed layer} x 2 train steps of these settings, tiny tied Qwen2: the
# largest |weight difference| 2.8e-7 (full 1.4e-7, LoRA 6.0e-8), the largest relative loss
# difference 7.8e-7. A step's update is ~1e-3 per weight: a lost or doubled micro-batch moves
# weights by 1e-5 or more. (bf16 autocast, not tested here: up to 7.7e-5, the bf16 head.)
WEIGHT_ATOL = 1e-6
METRIC_RTOL = 1e-5


def _config(offload: str, **overrides) -> LearnerConfig:
    return LearnerConfig(**{**_BASE, "offload_optimizer": offload, **overrides})


@pytest.fixture(scope="module", autouse=True)
def _one_rank_group():
    """The learners here open a process group of one (learner/sharding.py); close it after the
    module, so that later tests in this process start without one."""
    yield
    if dist.is_initialized():
        dist.destroy_process_group()


def _run(model_path: str, config: LearnerConfig, steps: int = 2, **learner) -> dict:
    built = Learner(model_path, config, loss=KL, export_dtype="float32", **learner)
    start = built.step
    metrics = [built.train_step(tiny_samples(12, seed=start + i)) for i in range(steps)]
    return {"learner": built, "metrics": metrics, "weights": built.export_tensors()}


def _assert_same_update(got: dict, want: dict) -> None:
    assert got["weights"].keys() == want["weights"].keys()
    for name, tensor in want["weights"].items():
        torch.testing.assert_close(got["weights"][name], tensor, rtol=0, atol=WEIGHT_ATOL, msg=name)
    for got_step, want_step in zip(got["metrics"], want["metrics"], strict=True):
        for key in ("train/loss", "train/kl", "train/grad_norm", "train/logprob_diff_mean"):
            assert got_step[key] == pytest.approx(want_step[key], rel=METRIC_RTOL, abs=1e-8), key


UPDATES = {
    "full": {},
    "lora": {"lora": LoraConfig(enabled=True, rank=4)},
    "epochs": {"ppo_epochs": 2, "mini_batches": 2},
    # FSDP2's hooks gather a checkpointed layer's parameters again for its recompute
    "checkpointed_layer": {"gradient_checkpointing": 1},
}


@pytest.mark.parametrize("name", list(UPDATES))
def test_the_offloaded_step_computes_the_on_device_update(tied_model, name):
    want = _run(tied_model, _config("never", **UPDATES[name]))
    got = _run(tied_model, _config("step", **UPDATES[name]))
    config = _config("never", **UPDATES[name])
    before = Learner(tied_model, config, loss=KL, export_dtype="float32")
    initial = before.export_tensors()
    assert any(not torch.equal(t, initial[n]) for n, t in want["weights"].items())
    _assert_same_update(got, want)


def test_the_state_lives_on_the_host_and_the_reference_on_the_device(tied_model):
    """Every trained parameter is a one-shard DTensor in host memory, and so are its gradient
    (until the step frees it) and AdamW's moments; the frozen reference stays a plain module."""
    learner = Learner(tied_model, _config("step"), loss=KL)
    learner.trainer.accumulate_gradients(tiny_samples(12), learner.loss_beta)
    for param in learner.trainable:
        assert isinstance(param, DTensor) and param.to_local().device.type == "cpu"
        assert isinstance(param.grad, DTensor) and param.grad.to_local().device.type == "cpu"
    learner.trainer.optimizer_step()
    moments = [state["exp_avg_sq"] for state in learner.optimizer.state.values()]
    assert len(moments) == len(learner.trainable)
    assert all(isinstance(m, DTensor) and m.to_local().device.type == "cpu" for m in moments)
    frozen = list(learner.reference.frozen.parameters())
    assert frozen and not any(isinstance(p, DTensor) for p in frozen)


@pytest.mark.parametrize("resume_with", ["step", "never"])
def test_a_checkpoint_resumes_the_run_with_either_setting(tied_model, tmp_path, resume_with):
    """A one-rank checkpoint keeps its layout (optimizer.pt, plain tensors) whether the state
    was on the host: resumed with "step" or "never", the next step is the straight run's."""
    straight = _run(tied_model, _config("step"), steps=2)
    first = _run(tied_model, _config("step"), steps=1)
    first["learner"].save_checkpoint(str(tmp_path / "ckpt"))
    files = {p.name for p in (tmp_path / "ckpt").iterdir()}
    assert {"model.safetensors", "optimizer.pt", "learner_state.json"} <= files
    state = torch.load(tmp_path / "ckpt" / "optimizer.pt", weights_only=True)["state"]
    assert state and all(type(v) is torch.Tensor for s in state.values() for v in s.values())
    resumed = _run(tied_model, _config(resume_with), steps=1, resume_from=str(tmp_path / "ckpt"))
    assert resumed["learner"].step == 2
    _assert_same_update(
        {"metrics": resumed["metrics"], "weights": resumed["weights"]},
        {"metrics": straight["metrics"][1:], "weights": straight["weights"]},
    )


def test_a_lora_checkpoint_saves_the_adapter_and_resumes(tied_model, tmp_path):
    lora = {"lora": LoraConfig(enabled=True, rank=4)}
    straight = _run(tied_model, _config("step", **lora), steps=2)
    first = _run(tied_model, _config("step", **lora), steps=1)
    first["learner"].save_checkpoint(str(tmp_path / "ckpt"))
    assert (tmp_path / "ckpt" / "adapter_model.safetensors").is_file()
    resumed = _run(tied_model, _config("step", **lora), steps=1, resume_from=str(tmp_path / "ckpt"))
    _assert_same_update(
        {"metrics": resumed["metrics"], "weights": resumed["weights"]},
        {"metrics": straight["metrics"][1:], "weights": straight["weights"]},
    )


def test_a_learner_inside_fsdp2_resumes_only_through_its_constructor(tied_model, tmp_path):
    learner = Learner(tied_model, _config("step"), loss=KL)
    with pytest.raises(ValueError, match=r"resumes through Learner\(\.\.\., resume_from=path\)"):
        learner.load_training_state(str(tmp_path))


def test_step_needs_no_colocated_engine_and_turns_auto_compile_off():
    config = load_config(None, ["--learner.offload_optimizer", "step", "--learner.num_gpus", "1"])
    assert not config.rollout.colocate
    assert not config.learner.compile_on("cuda")
    assert load_config(None, ["--learner.num_gpus", "1"]).learner.compile_on("cuda")


REFUSED = {
    "adamw_8bit": (
        ["--learner.optimizer", "adamw_8bit"],
        r"learner.offload_optimizer = 'step' steps torch's AdamW on the host: "
        r"learner.optimizer = 'adamw_8bit'",
    ),
    "compile": (["--learner.compile", "true"], r"learner.compile = true is not available with"),
    "adapter": (
        ["--learner.lora.enabled", "true", "--learner.lora.export", "adapter"],
        r"'step' sends merged weights: lora.export = 'adapter'",
    ),
    "precomputed": (
        ["--learner.reference", "precomputed"],
        r"reference = 'precomputed' swaps the initial weights",
    ),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_combinations_step_does_not_carry_are_refused_in_one_line(name):
    flags, message = REFUSED[name]
    with pytest.raises(ConfigError, match=message) as refused:
        load_config(None, ["--learner.offload_optimizer", "step", *flags])
    reason = str(refused.value).splitlines()[-1]  # one line, under "invalid configuration:"
    assert re.search(message, reason), reason


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_the_state_is_pinned_on_the_host_and_the_update_matches(
    tied_model,
):  # pragma: no cover (no GPU in CI)
    """On a GPU: the trained parameters' shards and AdamW's moments in pinned host memory,
    nothing of them left on the card between steps but the frozen reference, and the update
    the on-device optimiser computes (the CPU-measured tolerance; not yet run on a GPU)."""
    want = _run(tied_model, _config("never", num_gpus=1))
    got = _run(tied_model, _config("step", num_gpus=1))
    _assert_same_update(got, want)
    del want  # the on-device learner's memory, before this one's is counted
    gc.collect()
    learner = got["learner"]
    assert learner.device.type == "cuda"
    for param in learner.trainable:
        assert param.to_local().device.type == "cpu" and param.to_local().is_pinned()
    for state in learner.optimizer.state.values():
        assert state["exp_avg"].to_local().device.type == "cpu"
    reference = sum(p.numel() * p.element_size() for p in learner.reference.frozen.parameters())
    assert torch.cuda.memory_allocated() < 2 * reference + (1 << 20)
