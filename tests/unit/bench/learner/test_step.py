"""``python -m bench.learner`` runs real learner steps on a random model built from a preset."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from bench.learner.step import (
    PRESETS,
    bench_config,
    build_random_model,
    main,
    parse_args,
    random_batch,
)
from tests.conftest import REPO_ROOT


def test_random_batch_has_the_rollout_shape():
    samples = random_batch(prompts=3, group=4, prompt_len=5, completion_len=7, vocab=50)
    assert len(samples) == 12
    assert {len(s.completion_token_ids) for s in samples} == {7}
    assert {s.group_index for s in samples} == {0, 1, 2}
    assert [s.advantage for s in samples[:4]] == [1.0, -1.0, 1.0, -1.0]
    assert all(0 <= t < 50 for s in samples for t in s.prompt_token_ids + s.completion_token_ids)


def test_a_config_file_gives_the_learner_and_the_flags_given_win():
    """``--config``: a shipped config's [learner] and [algorithm.loss] are what the row measures
    (its checkpointing, memory target, optimiser and reference, not the bench's defaults); a
    flag given and a --learner or --algorithm.loss override win."""
    shipped = str(REPO_ROOT / "configs" / "qwen2.5-coder-1.5b-mbpp.toml")
    config, loss = bench_config(*parse_args(["--config", shipped, "--prompt-len", "384"]))
    assert (config.gradient_checkpointing, config.memory_gib) == (True, 27)
    assert (config.lr, loss.beta, config.optimizer) == (1e-6, 0.04, "adamw_8bit")
    argv = ["--config", shipped, "--micro-batch-tokens", "4096", "--algorithm.loss.beta", "0"]
    config, loss = bench_config(*parse_args(argv))
    assert (config.gradient_checkpointing, config.micro_batch_tokens, loss.beta) == (
        True,
        4096,
        0.0,
    )
    assert bench_config(*parse_args(["--config", shipped, "--beta", "0.1"]))[1].beta == 0.1
    # a colocated config's learner too (the bench has no engine to pair it with), on ranks
    for name in ("qwen2.5-coder-1.5b-mbpp-1gpu.toml", "qwen2.5-coder-0.5b-lora-mbpp-1gpu.toml"):
        colocated = str(Path(shipped).parent / name)
        config, _ = bench_config(*parse_args(["--config", colocated, "--ranks", "2"]))
        assert config.num_ranks == 2 and config.memory_gib > 0
    # without a file the flags' defaults, as before
    config, loss = bench_config(*parse_args([]))
    assert (config.gradient_checkpointing, config.micro_batch_tokens) == (False, 8192)
    assert loss.beta == 0.04


def test_presets_match_the_public_shapes():
    qwen = PRESETS["qwen2.5-1.5b"]
    assert (qwen["hidden_size"], qwen["num_hidden_layers"], qwen["vocab_size"]) == (
        1536,
        28,
        151936,
    )
    # Qwen2.5-7B's config.json
    seven = PRESETS["qwen2.5-7b"]
    keys = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads")
    assert tuple(seven[k] for k in keys) == (3584, 28, 28, 4)
    assert (seven["intermediate_size"], seven["vocab_size"]) == (
        18944,
        152064,
    )  # its parameter count, 7,615,616,512, needs 152,064
    assert seven["tie_word_embeddings"] is False


def test_bench_reports_step_time_throughput_and_memory(tmp_path, capsys):
    out = tmp_path / "result.json"
    argv = ["--preset", "tiny", "--prompts", "2", "--group", "2", "--prompt-len", "4",
            "--completion-len", "8", "--steps", "1", "--warmup", "0", "--lora", "--layers", "1",
            "--learner.lora.rank", "4", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    result = json.loads(out.read_text())
    assert result["samples"] == 4 and result["completion_tokens"] == 32
    assert result["step_s"] > 0 and result["tokens_per_s"] > 0
    assert result["peak_memory_gib"] > 0
    # LoRA from the flag, rank from the override: only the adapter trains
    assert result["learner"]["lora"]["rank"] == 4
    assert 0 < result["trainable_parameters"] < result["parameters"]
    # utilisation: the step's model FLOP/s over the matmul peak measured in the same run
    achieved = result["model_tflop_per_step"] / result["step_s"]
    assert result["achieved_tflops"] == pytest.approx(achieved) and result["peak_tflops"] > 0
    assert result["utilisation"] == pytest.approx(achieved / result["peak_tflops"])
    assert result["utilisation"] > 0
    # LoRA's 4 N T counts the same on both paths, and this batch's prompts run once either way
    assert 0 < result["mfu"] <= result["utilisation"] * 1.0001
    # on CPU the phases' peaks are live tensor bytes; the largest is the step's peak
    phases = result["phase_peak_gib"]
    assert {"reference_forward", "policy_forward", "lm_head", "backward"} <= set(phases)
    assert max(phases.values()) == result["peak_memory_gib"] and result["peak_rss_gib"] > 0
    assert result["layers"] == 1
    # the fit it ran with: on CPU without a memory target, the budget as configured
    assert result["resolved"]["micro_batch_tokens"] == result["learner"]["micro_batch_tokens"]
    assert result["resolved"]["checkpointed_layers"] == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == result
    assert "phase backward: peak" in captured.err


def test_the_shipped_config_runs_on_cpu_with_its_8_bit_optimiser(tmp_path):
    """configs/qwen2.5-coder-1.5b-mbpp.toml keeps AdamW's moments in 8 bits (torchao), whose
    step compiles with fullgraph=True; on CPU the phases count with a dispatch mode, under
    which dynamo refuses to trace, and the bench failed at its first optimiser step."""
    out = tmp_path / "result.json"
    config = REPO_ROOT / "configs/qwen2.5-coder-1.5b-mbpp.toml"
    argv = ["--preset", "tiny", "--config", str(config), "--prompts", "2", "--group", "2",
            "--prompt-len", "4", "--completion-len", "8", "--steps", "2", "--warmup", "0",
            "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    result = json.loads(out.read_text())
    assert result["learner"]["optimizer"] == "adamw_8bit"
    assert result["phase_peak_gib"]["optimizer_step"] > 0


def test_the_24gb_config_runs_on_cpu_with_its_state_on_the_host(tmp_path):
    """configs/qwen2.5-coder-1.5b-mbpp-24gb.toml: plain AdamW stepped on the host
    (learner.offload_optimizer = "step"), the policy inside FSDP2 on one rank, not compiled;
    its phases are counted as any learner's."""
    out = tmp_path / "result.json"
    config = REPO_ROOT / "configs/qwen2.5-coder-1.5b-mbpp-24gb.toml"
    argv = ["--preset", "tiny", "--config", str(config), "--prompts", "2", "--group", "2",
            "--prompt-len", "4", "--completion-len", "8", "--steps", "2", "--warmup", "0",
            "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    result = json.loads(out.read_text())
    assert (result["learner"]["offload_optimizer"], result["learner"]["optimizer"]) == (
        "step",
        "adamw",
    )
    assert result["resolved"]["compile"] is False and result["memory_cap_gib"] == 0.0
    assert result["phase_peak_gib"]["optimizer_step"] > 0


def test_a_profiled_step_says_where_its_time_goes(tmp_path):
    out, table = tmp_path / "result.json", tmp_path / "ops.txt"
    argv = ["--preset", "tiny", "--prompts", "2", "--group", "2", "--prompt-len", "4",
            "--completion-len", "8", "--steps", "1", "--warmup", "0", "--out", str(out),
            "--profile", str(table)]  # fmt: skip
    assert main(argv) == 0
    profile = json.loads(out.read_text())["profile"]
    kinds = profile["kinds_s"]
    # the matrix products and the optimiser are there, and the kinds add up to the busy time
    assert kinds["matmul"] > 0 and kinds["optimizer"] > 0
    assert sum(kinds.values()) == pytest.approx(profile["busy_s"])
    assert profile["busy_s"] > 0 and profile["step_s"] > 0
    assert len(profile["top"]) <= 12 and profile["top"][0]["s"] >= profile["top"][-1]["s"]
    assert "aten::mm" in table.read_text()


def test_kinds_of_work_by_kernel_and_operator_name():
    from bench.learner.profile import kind_of

    names = {
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64": "matmul",
        "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTN": "matmul",
        "aten::mm": "matmul",
        "pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>": "attention",
        "fmha_cutlassF_bf16_aligned_64x64_rf_sm80": "attention",
        "triton_poi_fused__to_copy_add_mul_0": "fused",
        "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>": "log_softmax",
        "void at::native::multi_tensor_apply_kernel<TensorListMetadata<4>>": "optimizer",
        "Memcpy DtoD (Device -> Device)": "copy",
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add>": "other",
    }
    assert {name: kind_of(name) for name in names} == names


def test_layers_override_keeps_every_other_dimension(tmp_path):
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(build_random_model("tiny", tmp_path, layers=1))
    tiny = PRESETS["tiny"]
    assert config.num_hidden_layers == 1 and tiny["num_hidden_layers"] == 2
    for key in ("hidden_size", "intermediate_size", "num_attention_heads", "vocab_size"):
        assert getattr(config, key) == tiny[key]


def test_step_flops_by_hand():
    from learner.flops import step_flops

    # N = 10 matmul parameters, 2 layers of attention width 4, sequences of 3 and 5 tokens:
    # 6 N T = 480; causal attention forward 2 * 2 * 4 * (9 + 25) = 544, x3 with the backward
    assert step_flops(10, 2, 4, [3, 5]) == 480 + 3 * 544
    assert step_flops(10, 2, 4, [3, 5], lora=True) == 320 + 3 * 544
    assert step_flops(10, 2, 4, [3, 5], reference=True) == 480 + 3 * 544 + 160 + 544


def test_matmul_parameters_count_the_head_once(tmp_path):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from learner.flops import matmul_parameters

    shape = {k: v for k, v in PRESETS["tiny"].items() if k != "tie_word_embeddings"}
    for tied in (True, False):
        model = Qwen2ForCausalLM(Qwen2Config(**shape, tie_word_embeddings=tied))
        total = sum(p.numel() for p in model.parameters())
        embedding = model.get_input_embeddings().weight.numel()
        # tied: the one matrix is also the LM head's product; untied: the lookup is not one
        assert matmul_parameters(model) == (total if tied else total - embedding)


def test_bad_learner_override_is_a_clean_error(capsys):
    assert main(["--preset", "tiny", "--learner.no_such_key", "1"]) == 2
    assert "learner.no_such_key" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--prompts", "0"),
        ("--group", "0"),
        ("--steps", "0"),
        ("--warmup", "-1"),
        ("--threads", "0"),
    ],
)
def test_a_size_out_of_range_is_refused_by_argparse(capsys, flag, value):
    with pytest.raises(SystemExit) as stop:
        main(["--preset", "tiny", flag, value])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "Traceback" not in err
    (line,) = [line for line in err.splitlines() if "error" in line]
    assert line.startswith(f"python -m bench.learner: error: argument {flag}: must be")


def test_an_out_that_is_a_directory_is_refused_before_any_step(tmp_path, capsys, monkeypatch):
    import bench.learner.step as step

    def too_soon(*_args, **_kwargs):
        raise AssertionError("the bench ran before --out was checked")

    monkeypatch.setattr(step, "run", too_soon)
    assert main(["--preset", "tiny", "--out", str(tmp_path)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [f"error: --out: {tmp_path} is a directory; give the path of a file"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is a CPU machine's")
def test_a_memory_cap_without_cuda_is_refused_before_any_step(capsys, monkeypatch):
    import bench.learner.step as step

    def too_soon(*_args, **_kwargs):
        raise AssertionError("the bench ran before --memory-cap-gib was checked")

    monkeypatch.setattr(step, "run", too_soon)
    assert main(["--preset", "tiny", "--memory-cap-gib", "22"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: --memory-cap-gib caps torch's allocations on a CUDA card")


def test_every_step_reports_its_model_flops(tmp_path):
    from bench.learner.step import build_random_model
    from common.config import LearnerConfig, LossConfig
    from learner.flops import forward_flops, model_config_shape, step_flops
    from learner.learner import Learner

    path = str(build_random_model("tiny", tmp_path))
    learner = Learner(path, LearnerConfig(), loss=LossConfig(beta=0.04))
    metrics = learner.train_step(random_batch(2, 2, 4, 8, vocab=256))
    # two prompts of 4 tokens, each run once (learner.share_prompts), and 4 completions of 8
    shape, lengths = model_config_shape(learner.model), [4, 4] + [(4, 8)] * 4
    # one epoch forward and backward, plus the reference's forward (beta > 0, KL in the loss)
    want = step_flops(*shape, lengths) + forward_flops(*shape, lengths)
    assert metrics["train/model_tflop"] == pytest.approx(want / 1e12)


def test_two_ranks_hold_half_the_state_each(tmp_path):
    """``--ranks 2``: each rank holds half the parameters, gradients and AdamW state (up to the
    shards' rounding: FSDP pads a tensor whose first dimension is odd)."""
    argv = ["--preset", "tiny", "--prompts", "2", "--group", "2", "--prompt-len", "4",
            "--completion-len", "8", "--steps", "1", "--warmup", "0",
            "--dtype", "float32"]  # fmt: skip
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    assert main([*argv, "--out", str(one)]) == 0
    assert main([*argv, "--ranks", "2", "--out", str(two)]) == 0
    whole, sharded = json.loads(one.read_text()), json.loads(two.read_text())
    assert len(sharded["ranks"]) == 2 and sharded["parameters"] == whole["parameters"]
    for rank in sharded["ranks"]:
        assert rank["state_gib"] == pytest.approx(whole["state_gib"] / 2, rel=0.02)
        assert rank["step_s"] > 0 and rank["peak_memory_gib"] > 0


def test_mfu_counts_each_prompt_once_whatever_the_path(tmp_path):
    """``train/mfu``: the FLOPs the step needs (prompts once) over the step's time and the
    peak (here ``learner.peak_tflops``); ``train/model_tflop``: what the learner's path ran."""
    from bench.learner.step import build_random_model
    from common.config import LearnerConfig, LossConfig
    from learner.flops import forward_flops, model_config_shape, step_flops
    from learner.learner import Learner

    path, samples = str(build_random_model("tiny", tmp_path)), random_batch(2, 2, 4, 8, vocab=256)
    ran = {}
    for share in (True, False):
        config = LearnerConfig(share_prompts=share, peak_tflops=0.001)
        learner = Learner(path, config, loss=LossConfig(beta=0.04))
        metrics = learner.train_step(samples)
        shape, lengths = model_config_shape(learner.model), [4, 4] + [(4, 8)] * 4
        needed = step_flops(*shape, lengths) + forward_flops(*shape, lengths)
        achieved = needed / metrics["train/step_time_s"]
        assert metrics["train/mfu"] == pytest.approx(achieved / 1e9)
        ran[share] = metrics["train/model_tflop"]
    assert ran[False] > ran[True]  # without sharing each row runs its prompt: more work


def test_the_mfu_peak_is_measured_once_per_process(monkeypatch):
    import torch

    from common.config import LearnerConfig
    from learner import flops

    calls = []

    def fake_peak(device, dtype, size=0, repeats=3):
        calls.append((device.type, dtype, size))
        return 5e10

    monkeypatch.setattr(flops, "peak_flops", fake_peak)
    flops._cached_peak.cache_clear()
    cpu = torch.device("cpu")
    for _ in range(2):
        assert flops.mfu_peak_flops(LearnerConfig(num_cpus=2), cpu) == 5e10
    assert calls == [("cpu", torch.float32, flops.MFU_CPU_SIZE)]
    assert flops.mfu_peak_flops(LearnerConfig(peak_tflops=2.5), cpu) == 2.5e12  # not measured
    assert len(calls) == 1
    flops._cached_peak.cache_clear()  # later tests measure for real


def test_the_learner_measures_its_peak_before_its_first_step_not_when_built(tmp_path, monkeypatch):
    """A colocated engine may still be starting on the device while the learner is built: the
    peak is measured just before the first step's compute, once, and train/mfu divides by it."""
    from bench.learner.step import build_random_model
    from common.config import LearnerConfig
    from learner import learner as learner_module

    events = []

    def fake_peak(config, device):
        events.append("peak")
        return 1e9

    monkeypatch.setattr(learner_module, "mfu_peak_flops", fake_peak)
    path, samples = str(build_random_model("tiny", tmp_path)), random_batch(2, 2, 4, 8, vocab=256)
    learner = learner_module.Learner(path, LearnerConfig())
    assert events == []  # not at construction
    train = learner.trainer.train
    monkeypatch.setattr(
        learner.trainer, "train", lambda *a, **k: events.append("step") or train(*a, **k)
    )
    first = learner.train_step(samples)
    learner.train_step(samples)
    assert events == ["peak", "step", "step"]
    needed = learner.model_flops(samples, share_prompts=True)
    assert first["train/mfu"] == pytest.approx(needed / first["train/step_time_s"] / 1e9)


def test_the_cpu_peak_grows_its_products_only_while_they_are_quick(monkeypatch):
    """On a CPU without bf16 instructions (AVX2 only) a 4096 x 4096 bf16 product takes minutes:
    the sizes stop at the first whose product takes CPU_PRODUCT_S, and never pass the largest."""
    import torch

    from learner import flops

    monkeypatch.setattr(flops, "CPU_PRODUCT_S", 0.0)  # every product is slow enough: the first
    assert flops.cpu_product_size(torch.float32, 4096) == 256
    monkeypatch.setattr(flops, "CPU_PRODUCT_S", float("inf"))  # none is: up to the largest
    assert flops.cpu_product_size(torch.float32, 1024) == 1024
    assert flops.cpu_product_size(torch.float32, 100) == 100  # a largest under the first size
    # a CPU that takes size^3 / 1e9 s a product: 256 (0.017 s) and 512 (0.13) are quick, 1024
    # (1.07) is the first slow enough
    clock = [0.0]

    def product(a, b):
        clock[0] += a.shape[0] ** 3 / 1e9

    monkeypatch.setattr(flops, "CPU_PRODUCT_S", 0.2)
    monkeypatch.setattr(flops.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(flops.torch, "mm", product)
    assert flops.cpu_product_size(torch.float32, 4096) == 1024
