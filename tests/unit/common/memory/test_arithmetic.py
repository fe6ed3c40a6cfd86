"""common/memory/arithmetic.py: parameter counts of the public shapes, the learner's state as the
code keeps it, activations against issue 34's H200 measurements, the micro-batch budget from a
memory target, and the engine's bytes."""

from __future__ import annotations

from functools import partial

import pytest

from common.config import load_config
from common.memory.arithmetic import (
    COMPILED_ACTIVATION_FACTOR,
    GIB,
    HEAD_FUNCTION_LOGIT_TENSORS,
    IN_FLIGHT_LAYERS,
    LOGIT_TENSORS_AT_PEAK,
    ModelShape,
    activation_bytes_per_token,
    learner_state,
)
from common.memory.engine import engine_memory, kv_cache_tokens
from common.memory.fit import (
    MAX_MICRO_BATCH_TOKENS,
    MemoryTargetError,
    learner_step_peak,
    micro_batch_budget,
)
from tests.conftest import REPO_ROOT
from tests.unit.public_models import shape

#: These learners train with a KL term (beta 0.04, ``[algorithm.loss]``), so they keep a
#: reference, which the arithmetic counts where it is told so (``with_reference``).
learner_state = partial(learner_state, with_reference=True)
learner_step_peak = partial(learner_step_peak, with_reference=True)
micro_batch_budget = partial(micro_batch_budget, with_reference=True)


def learner(*overrides: str):
    """The learner config of bf16 autocast with fp32 masters, as bench.learner ran issue 34's
    rows (shared prompts on and compile off, the defaults then), plus ``--learner.key value``
    overrides."""
    base = ["--learner.dtype", "bfloat16"]
    base += ["--learner.share_prompts", "true", "--learner.compile", "false"]
    pairs = [f"--learner.{word}" if i % 2 == 0 else word for i, word in enumerate(overrides)]
    return load_config(None, base + pairs).learner


@pytest.mark.parametrize(
    ("name", "parameters"),
    [
        ("qwen2.5-coder-0.5b", 494_032_768),  # the model card's 0.49B
        ("qwen2.5-coder-1.5b", 1_543_714_304),  # 1.54B
        ("qwen2.5-7b", 7_615_616_512),  # 7.61B, untied, vocabulary 152,064
    ],
)
def test_parameter_counts_match_the_public_models(name, parameters):
    assert shape(name).parameters == parameters


def test_lora_count_matches_peft_on_the_users_0_5b():
    # the seed note's peft print: "trainable params: 8,798,208" (r16 on all seven linears)
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    assert shape("qwen2.5-coder-0.5b").lora_parameters(16, targets) == 8_798_208


def test_from_config_names_a_missing_key():
    with pytest.raises(ValueError, match="'intermediate_size'"):
        ModelShape.from_config({"hidden_size": 8, "num_hidden_layers": 1,
                                "num_attention_heads": 1, "vocab_size": 8})  # fmt: skip


def test_full_fine_tuning_state_is_20_bytes_per_parameter_plus_autocast_copies():
    params = shape("qwen2.5-coder-1.5b").parameters
    state = learner_state(shape("qwen2.5-coder-1.5b"), learner())
    assert (state.weights, state.gradients, state.optimiser) == (4 * params, 4 * params, 8 * params)
    # learner.reference_dtype = "auto" on CUDA: the frozen copy in the compute dtype (bf16)
    assert state.reference == 2 * params
    assert state.autocast_copies == 2 * params  # tied: every parameter is a matmul weight
    fp32 = learner_state(shape("qwen2.5-coder-1.5b"), learner("reference_dtype", "float32"))
    assert fp32.reference == 4 * params  # the deep copy in the parameters' dtype
    eight_bit = learner_state(shape("qwen2.5-coder-1.5b"), learner("optimizer", "adamw_8bit"))
    assert eight_bit.optimiser == int(2 * params * (1 + 4 / 256))  # codes + a scale per 256


def test_reference_costs_nothing_without_beta_under_lora_or_precomputed():
    model = shape("qwen2.5-coder-1.5b")
    assert learner_state(model, learner(), with_reference=False).reference == 0  # beta 0
    assert learner_state(model, learner("lora.enabled", "true")).reference == 0
    assert learner_state(model, learner("reference", "precomputed")).reference == 0


def test_pure_bf16_halves_the_state_and_ranks_shard_it():
    model = shape("qwen2.5-coder-1.5b")
    mixed = learner_state(model, learner())
    pure = learner_state(model, learner("master_dtype", "same"))
    assert pure.weights * 2 == mixed.weights and pure.autocast_copies == 0
    sharded = learner_state(model, learner("num_ranks", "4", "num_gpus", "1"))
    assert sharded.optimiser == mixed.optimiser // 4


def test_the_state_on_the_host_leaves_the_device_the_units_in_flight_and_the_reference():
    """learner.offload_optimizer = "step": the fp32 master weights, gradients and moments (16 B
    per parameter) in host memory; on the device the root unit (the tied embedding, the final
    norm) and two decoder layers whole, their gradients, and what stays as without it."""
    model = shape("qwen2.5-coder-1.5b")
    params, layer = model.parameters, model.layer_parameters
    on_device = learner_state(model, learner())
    host = learner_state(model, learner("offload_optimizer", "step"))
    assert host.host == 16 * params
    assert (host.weights, host.optimiser, host.optimiser_temporaries) == (0, 0, 0)
    whole = params - model.layers * layer + IN_FLIGHT_LAYERS * layer  # root + two layers
    assert host.in_flight == pytest.approx(4 * whole, abs=4)
    assert host.gradients == pytest.approx(4 * whole, abs=4)
    assert host.reference == on_device.reference and host.tied_gradients > 0
    # between steps (an engine awake beside it) only the reference and the context stay
    assert host.between_steps() == host.reference + host.context
    # compile is off inside FSDP2, so autocast keeps its bf16 copies of every weight, which
    # compiled layers on the device would not
    compiled = learner_state(model, learner("compile", "true"))
    assert host.autocast_copies == 2 * params > compiled.autocast_copies
    # the step fits a 24 GB card's 22 GiB, the on-device one does not
    peak = learner_step_peak(
        model, learner("offload_optimizer", "step", "gradient_checkpointing", "true"), 8192
    )
    assert (
        peak < 20 * GIB < learner_step_peak(model, learner("gradient_checkpointing", "true"), 8192)
    )


def test_lora_state_is_the_base_plus_the_adapters_training_state():
    model = shape("qwen2.5-coder-0.5b")
    adapters = model.lora_parameters(16, ["q_proj", "k_proj", "v_proj", "o_proj"])
    config = learner("lora.enabled", "true", "lora.rank", "16")
    # a CUDA learner keeps the frozen base in bf16 ("auto"), a CPU learner in float32
    for device, base in (("cuda", 2), ("cpu", 4)):
        state = learner_state(model, config, device=device)
        assert state.weights == base * model.parameters + 4 * adapters
        assert state.gradients == 4 * adapters and state.optimiser == 8 * adapters


def test_checkpointing_and_chunked_logits_cut_activations_per_token():
    model = shape("qwen2.5-coder-1.5b")
    full = activation_bytes_per_token(model, learner())
    checkpointed = activation_bytes_per_token(model, learner("gradient_checkpointing", "true"))
    whole_logits = activation_bytes_per_token(model, learner("logprob_chunk_tokens", "0"))
    assert checkpointed < full / 3
    assert whole_logits - full == 5 * 4 * model.vocab  # float32 logits kept for every token


def test_the_cuda_defaults_are_counted_compiled_without_shared_prompts():
    """A GPU learner (the default device), where share_prompts = "auto" is off (no +16%) and
    compile = "auto" on: the layers' activations at the compiled step's measured fraction, and
    no autocast copies of the layers' weights (the LM head's kept)."""
    model = shape("qwen2.5-coder-1.5b")
    defaults = learner("share_prompts", "auto", "compile", "auto")
    compiled = learner("share_prompts", "false", "compile", "true")
    eager = learner("share_prompts", "false")
    assert activation_bytes_per_token(model, defaults) == activation_bytes_per_token(
        model, compiled
    )
    final = 3 * 4 * model.hidden  # the head's input, not a layer's: not scaled
    per_layer = activation_bytes_per_token(model, eager) - final
    scaled = int(per_layer * COMPILED_ACTIVATION_FACTOR) + final
    assert activation_bytes_per_token(model, compiled) == scaled
    assert activation_bytes_per_token(model, learner()) > per_layer + final  # shared, eager
    layers = model.layers * model.layer_parameters
    copies = (
        learner_state(model, eager).autocast_copies - learner_state(model, compiled).autocast_copies
    )
    assert copies == 2 * layers and learner_state(model, compiled).autocast_copies > 0
    # on CPU compile = "auto" is off, and a compiled CPU step is counted eager (not measured)
    cpu = learner("share_prompts", "false", "compile", "true")
    assert activation_bytes_per_token(model, cpu, device="cpu") == per_layer + final


def test_auto_settings_are_counted_as_the_learners_device_resolves_them():
    """On CPU share_prompts = "auto" is on (+16% without checkpointing) and reference_dtype =
    "auto" keeps the policy's dtype (fp32 masters: 4 B); on CUDA neither (bf16: 2 B)."""
    model, params = shape("qwen2.5-coder-1.5b"), shape("qwen2.5-coder-1.5b").parameters
    defaults = learner("share_prompts", "auto", "reference_dtype", "auto")
    cuda = activation_bytes_per_token(model, defaults, device="cuda")
    assert activation_bytes_per_token(model, defaults, device="cpu") > cuda
    assert learner_state(model, defaults, device="cpu").reference == 4 * params
    assert learner_state(model, defaults, device="cuda").reference == 2 * params
    checkpointed = learner("share_prompts", "auto", "gradient_checkpointing", "true")
    assert (
        len({activation_bytes_per_token(model, checkpointed, device=d) for d in ("cpu", "cuda")})
        == 1
    )


#: The LoRA rows were measured with the frozen base in float32 (lora.base_dtype, "auto" since:
#: bf16 on a CUDA learner).
F32_BASE = ("lora.base_dtype", "float32")

#: Issue 34's table, measured with bench.learner on an H200 (16 prompts x 8 x (128 + 512)
#: tokens unless said, beta 0.04, bf16 autocast, fp32 masters): (shape, learner overrides,
#: row length, micro-batch budget, measured peak GiB).
MEASURED = [
    ("qwen2.5-coder-1.5b", (), 640, 8192, 70.5),
    ("qwen2.5-coder-1.5b", ("share_prompts", "false"), 640, 8192, 65.2),
    ("qwen2.5-coder-1.5b", ("gradient_checkpointing", "true"), 640, 8192, 42.5),
    ("qwen2.5-coder-1.5b", ("gradient_checkpointing", "true"), 640, 4096, 38.3),
    ("qwen2.5-coder-1.5b", ("gradient_checkpointing", "true"), 896, 16384, 47.5),
    ("qwen2.5-coder-0.5b", ("lora.enabled", "true", "lora.rank", "16", *F32_BASE), 640, 8192,
     23.5),
    ("qwen2.5-coder-0.5b", ("lora.enabled", "true", "lora.rank", "16", *F32_BASE,
                            "gradient_checkpointing", "true"), 640, 8192, 12.0),
]  # fmt: skip


@pytest.mark.parametrize(("name", "overrides", "row", "budget", "measured"), MEASURED)
def test_step_peak_is_within_15_percent_of_the_h200_measurements(
    name, overrides, row, budget, measured
):
    tokens = budget // row * row  # whole rows of one length fill a micro-batch
    context = 0.5  # the plan counts a CUDA context; max_memory_allocated does not
    config = learner(*overrides, "reference_dtype", "float32")  # the reference then was fp32
    model = shape(name)
    peak = learner_step_peak(model, config, tokens, row_tokens=row) + code_then(model, tokens)
    assert 0.95 * measured <= peak / GIB - context <= 1.15 * measured


#: The same rows on the code of 2026-11-27 (c010dfe), an H200, CUDA defaults (compiled layers,
#: prompts not shared, a bf16 reference): (shape, learner overrides or a config file, row length,
#: the micro-batch the bench ran, measured peak GiB). docs/benchmarks.md, "Issue 34 on a lent GPU".
ALL_LINEAR = '["q_proj","k_proj","v_proj","o_proj","gate_proj","up_proj","down_proj"]'
MEASURED_COMPILED = [
    ("qwen2.5-coder-1.5b", ("config", "qwen2.5-coder-1.5b-mbpp.toml"), 896, 19712, 23.92),
    ("qwen2.5-coder-1.5b", (), 640, 7680, 45.96),
    ("qwen2.5-coder-0.5b", ("lora.enabled", "true", *F32_BASE), 640, 7680, 9.25),
    ("qwen2.5-7b", ("lora.enabled", "true", "lora.target_modules", ALL_LINEAR, *F32_BASE), 640,
     7680, 78.11),
    # the same card on 3dbf555 (compiled reference and LM-head kernels): the shipped config at
    # its 27 GiB target (23 rows a micro-batch by the count: the bench did not record the fit
    # then), the 0.5B LoRA's bf16 base
    ("qwen2.5-coder-1.5b", ("config", "qwen2.5-coder-1.5b-mbpp.toml"), 896, 20608, 24.18),
    ("qwen2.5-coder-0.5b", ("lora.enabled", "true"), 640, 7680, 7.00),
]  # fmt: skip


@pytest.mark.parametrize(("name", "overrides", "row", "tokens", "measured"), MEASURED_COMPILED)
def test_a_compiled_step_is_counted_at_or_above_its_h200_peak(
    name, overrides, row, tokens, measured
):
    """COMPILED_ACTIVATION_FACTOR is the largest of the first four rows' measured fractions, so
    the count never falls under one of them; the row whose fraction is farthest from it (the
    0.5B LoRA's, 0.44) is over-counted most: +36%, hence the 1.40 bound. The two rows measured
    after the factor was fitted are counted +9% (shipped config) and +30% (bf16 LoRA base)."""
    flags = ["--learner.dtype", "bfloat16", "--learner.num_gpus", "1"]
    flags += ["--rollout.colocate", "false"]  # as bench.learner reads a config: no engine
    path = None
    if overrides[:1] == ("config",):
        path, overrides = REPO_ROOT / "configs" / overrides[1], ()
    flags += [f"--learner.{w}" if i % 2 == 0 else w for i, w in enumerate(overrides)]
    config = load_config(path, flags).learner
    peak = learner_step_peak(shape(name), config, tokens, row_tokens=row) / GIB - 0.5
    assert measured <= peak <= 1.40 * measured


def code_then(model: ModelShape, tokens: int) -> int:
    """What 1b02179's learner, which the H200 rows measured, held and today's does not: the
    LM head's checkpointed chunks (5 float32 (chunk, V) tensors where learner/lm_head.py keeps
    2), and the graph of the metric entropy that each chunk's recompute built and no gradient
    consumed (learner/logprobs.py ``entropy_grad``), alive to the end of the backward pass:
    fitted to these rows as 4 B x vocabulary per micro-batch token (one float32 (rows, V)
    tensor per token of which ~80% are completion tokens holding two; found on CPU with live
    tensor bytes, docs/benchmarks.md "Where the peak goes")."""
    chunks = (LOGIT_TENSORS_AT_PEAK - HEAD_FUNCTION_LOGIT_TENSORS) * 4 * model.vocab * 1024
    return chunks + 4 * model.vocab * tokens


def test_the_derived_budget_fills_the_memory_target_and_no_more():
    model = shape("qwen2.5-coder-1.5b")
    config = learner("gradient_checkpointing", "true", "memory_gib", "36")
    budget = micro_batch_budget(model, config)
    assert learner_step_peak(model, config, budget) <= 36 * GIB
    assert learner_step_peak(model, config, budget + 64) > 36 * GIB


def test_the_budget_is_clamped_and_an_impossible_target_refused_in_one_line():
    model = shape("qwen2.5-coder-0.5b")
    roomy = learner("lora.enabled", "true", "gradient_checkpointing", "true", "memory_gib", "500")
    assert micro_batch_budget(model, roomy) == MAX_MICRO_BATCH_TOKENS
    with pytest.raises(MemoryTargetError, match=r"learner\.memory_gib \(20\) cannot hold") as err:
        micro_batch_budget(shape("qwen2.5-coder-1.5b"), learner("memory_gib", "20"))
    assert "\n" not in str(err.value)


def test_engine_bytes_are_weights_in_the_serving_dtype_and_the_kv_cache_as_passed():
    model = shape("qwen2.5-coder-1.5b")
    engine = engine_memory(model, "bfloat16", kv_cache_gib=16)
    assert engine.weights == 2 * model.parameters and engine.kv_cache == 16 * GIB
    assert engine.asleep < engine.awake - engine.weights - engine.kv_cache + 1
    # keys and values of 28 layers x 2 KV heads x 128 in bf16: 28 KiB per token
    assert kv_cache_tokens(model, "bfloat16", 1.0) == GIB // (2 * 28 * 256 * 2)
