"""``learner.reference_dtype``: the frozen reference kept in bf16 beside float32 master weights."""

from __future__ import annotations

import pytest
import torch

from algorithm.loss import kl_divergence
from bench.learner.perturb import PerturbableLearner
from common.config import LearnerConfig, LoraConfig, LossConfig
from learner.learner import Learner
from learner.reference import frozen_copy
from tests.unit.learner.helpers import BASE_OPTIONS, tiny_samples

#: a KL term, so the learner keeps a reference
KL = LossConfig(beta=0.05)


def _config(**overrides) -> LearnerConfig:
    return LearnerConfig(**{**BASE_OPTIONS, **overrides})


@pytest.mark.parametrize(
    ("settings", "cuda", "cpu"),
    [
        ({}, "float32", "float32"),
        ({"dtype": "bfloat16"}, "bfloat16", "float32"),  # CPU keeps the parameters' dtype
        ({"dtype": "bfloat16", "master_dtype": "same"}, "bfloat16", "bfloat16"),
        ({"reference_dtype": "bfloat16"}, "bfloat16", "bfloat16"),  # asked for: everywhere
        ({"dtype": "bfloat16", "reference_dtype": "float32"}, "float32", "float32"),
    ],
)
def test_auto_is_the_compute_dtype_on_cuda_and_the_parameters_on_cpu(settings, cuda, cpu):
    config = LearnerConfig(**settings)
    assert (config.reference_dtype_on("cuda"), config.reference_dtype_on("cpu")) == (cuda, cpu)


def test_a_bf16_frozen_copy_keeps_the_policy_float32_and_the_head_tied(tied_model):
    learner = Learner(tied_model, _config(dtype="bfloat16", reference_dtype="bfloat16"), loss=KL)
    with learner.reference.active() as reference:
        assert {p.dtype for p in reference.parameters()} == {torch.bfloat16}
        head = reference.get_output_embeddings().weight
        assert head is reference.get_input_embeddings().weight
    assert {p.dtype for p in learner.model.parameters()} == {torch.float32}


def test_frozen_copy_casts_each_parameter_and_keeps_buffers():
    model = torch.nn.BatchNorm1d(3)  # a parameter and float buffers
    copy = frozen_copy(model, torch.bfloat16)
    assert copy.weight.dtype == torch.bfloat16 and not copy.weight.requires_grad
    assert copy.running_mean.dtype == torch.float32 and copy.weight is not model.weight
    assert model.weight.dtype == torch.float32 and model.weight.requires_grad


def test_precomputed_reference_keeps_its_initial_weights_in_bf16_on_the_host(tied_model):
    config = _config(reference="precomputed", reference_dtype="bfloat16")
    learner = Learner(tied_model, config, loss=KL)
    pairs = learner.reference._initial._pairs
    assert pairs and all(initial.dtype == torch.bfloat16 for _, initial in pairs)
    assert all(param.dtype == torch.float32 for param, _ in pairs)


def test_lora_reference_is_the_base_with_the_adapter_off_whatever_the_dtype(tied_model):
    config = _config(lora=LoraConfig(enabled=True, rank=4), reference_dtype="bfloat16")
    learner = Learner(tied_model, config, loss=KL)
    assert learner.reference.mode == "lora_base" and learner.reference._frozen is None


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_the_kl_term_against_a_bf16_reference_is_within_tolerance(tied_model, dtype):
    """The batch's mean k3 KL against a bf16 frozen copy vs against a float32 one, the policy
    perturbed away from the reference (KL about 0.025).

    Measured on this tiny model (CPU, 8 seeds of 16 samples; the script is this test with
    more seeds): relative difference median 0.05%, max 0.23% under bf16 autocast
    (``dtype = "bfloat16"``); median 0.04%, max 0.15% for a float32 learner, whose bf16
    reference then runs wholly in bf16. Largest per-token reference logprob difference 0.003.
    The checkpoint is saved in bf16, as the public ones are, so the copy holds the reference's
    weights exactly and the difference is the bf16 arithmetic alone. Tolerance: 1%.
    """
    for seed in range(3):
        samples = tiny_samples(16, seed=seed)
        kl = {}
        for reference_dtype in ("float32", "bfloat16"):
            config = _config(dtype=dtype, reference_dtype=reference_dtype)
            learner = PerturbableLearner(tied_model, config, loss=KL)
            learner.perturb_weights_(0.02, seed=100 + seed)
            policy = torch.cat(learner.policy_logprobs(samples, temperature=1.0))
            reference = torch.cat(learner.reference_logprobs(samples))
            kl[reference_dtype] = kl_divergence(policy, reference, "k3").mean().item()
        assert kl["float32"] > 0.01
        assert kl["bfloat16"] == pytest.approx(kl["float32"], rel=0.01)
