"""Weight push is proven, not assumed: vLLM's logprobs follow the learner's weights.

Uses the tiny model with tied embeddings (like Qwen2.5), so the test also covers the CPU
engine's separately prepacked LM head, which a plain reload leaves stale.
"""

from __future__ import annotations

import weakref

import pytest
import torch

from common.config import LearnerConfig, ModelConfig, RolloutConfig
from common.types import TrainSample

pytestmark = pytest.mark.integration

#: Mean |Δ logprob| between the fp32 learner and the bf16 engine serving its pushed weights.
#: Measured after one N(0, 0.05²) perturbation of the initial tiny model and a push, 25 seeds x
#: 4 sequences: 0.0025-0.0081 (median 0.0050); a stale engine (the push left out) is 0.29-0.75
#: away. The gap grows with every further perturbation (0.03-0.05 after ten), because the random
#: model's logits grow and bf16 activations lose more: so each test perturbs the *initial*
#: weights (``_perturb``), never the previous test's. Measured 2026-11-25 on the 2-vCPU CI
#: machine by repeating ``_perturb`` + push + score for seeds 0-24 on this module's fixture.
BF16_TOLERANCE = 0.02


@pytest.fixture(scope="module")
def engine_and_learner(tiny_model_path):
    from actor.rollout_worker import RolloutWorker
    from bench.learner.perturb import PerturbableLearner

    rollout = RolloutConfig(batch_size=8, group_size=8, max_new_tokens=8, kv_cache_gib=0.1)
    worker = RolloutWorker(tiny_model_path, rollout, ModelConfig(max_model_len=128))
    learner = PerturbableLearner(tiny_model_path, LearnerConfig(num_cpus=1))
    yield worker, learner
    del worker


def _mean_abs_diff(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b)
    return sum(abs(x - y) for x, y in zip(a, b, strict=True)) / len(a)


def _sample(worker, prompt_text: str, completion_text: str) -> TrainSample:
    prompt = worker.tokenizer(prompt_text)["input_ids"]
    completion = worker.tokenizer(completion_text)["input_ids"]
    return TrainSample(prompt, completion, [0.0] * len(completion), 0.0, 0)


def _engine_logprobs(worker, sample: TrainSample) -> list[float]:
    version, [logprobs] = worker.score([sample])
    assert version == worker.weight_version
    return logprobs


_INITIAL: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _perturb(learner, seed: int) -> None:
    """The learner's initial weights plus N(0, 0.05²) noise (see BF16_TOLERANCE)."""
    initial = _INITIAL.setdefault(learner, [p.detach().clone() for p in learner.trainable])
    with torch.no_grad():
        for param, value in zip(learner.trainable, initial, strict=True):
            param.copy_(value)
    learner.perturb_weights_(0.05, seed=seed)


def _push_perturbed(worker, learner, sample: TrainSample, seed: int, more_buckets_than: int = 0):
    """Perturb the learner, check the engine no longer agrees, push the export, and check the
    engine now serves exactly the learner's new weights; returns the update."""
    _perturb(learner, seed)
    changed = learner.score([sample])[0]
    stale = _engine_logprobs(worker, sample)
    assert _mean_abs_diff(stale, changed) > 10 * BF16_TOLERANCE, "perturbation too small to test"

    update = learner.export_weights()
    assert len(update.payload) > more_buckets_than
    worker.update_weights(update)
    assert worker.weight_version == update.version == learner.weight_version
    assert _mean_abs_diff(_engine_logprobs(worker, sample), changed) < BF16_TOLERANCE
    return update


def test_push_makes_engine_logprobs_match_the_learner(engine_and_learner):
    worker, learner = engine_and_learner
    sample = _sample(
        worker, "# Return the number 3.\ndef answer():\n    return ", "3 + 4 * x\nprint(answer())"
    )
    before_engine = _engine_logprobs(worker, sample)
    assert _mean_abs_diff(before_engine, learner.score([sample])[0]) < BF16_TOLERANCE
    _push_perturbed(worker, learner, sample, seed=7)


def test_push_in_many_small_buckets_reaches_every_layer(engine_and_learner):
    """16 KiB buckets split the tiny model into many: each is loaded by its own engine call
    inside one reload session, and the engine still serves exactly the learner's weights."""
    worker, learner = engine_and_learner
    sample = _sample(
        worker, "# Return the number 8.\ndef answer():\n    return ", "8 - 2 * y\nprint(answer())"
    )
    default = learner.sender.bucket_bytes
    learner.sender.bucket_bytes = 16 << 10
    try:
        _push_perturbed(worker, learner, sample, seed=11, more_buckets_than=5)
    finally:
        learner.sender.bucket_bytes = default


def test_one_bucket_load_serves_what_the_layerwise_reload_serves(engine_and_learner):
    """A one-bucket update skips vLLM's layerwise session (actor/direct_load.py). Loading the
    same weights the other way (16 KiB buckets, layerwise) must leave the engine's logprobs
    bitwise unchanged, in both orders: every linear layer re-packed, the tied LM head too."""
    worker, learner = engine_and_learner
    sample = _sample(worker, "# Return the number 9.\n", "9 - 3 * z\nprint(answer())")
    default = learner.sender.bucket_bytes
    try:
        for seed in (21, 22):
            learner.sender.bucket_bytes = default
            one_bucket = _push_perturbed(worker, learner, sample, seed=seed)
            assert len(one_bucket.payload) == 1
            learner.sender.bucket_bytes = 16 << 10
            many_buckets = learner.export_weights()
            direct = _engine_logprobs(worker, sample)
            assert worker.update_weights(many_buckets)["direct_load"] == 0.0
            assert _engine_logprobs(worker, sample) == direct
            assert worker.update_weights(one_bucket)["direct_load"] == 1.0
            assert _engine_logprobs(worker, sample) == direct
    finally:
        learner.sender.bucket_bytes = default


def test_separate_engine_process_receives_bucketed_pushes(tiny_model_path):
    """rollout.engine_process = "separate": every bucket crosses vLLM's RPC to its engine-core
    process as bytes, and the engine still ends up serving the learner's weights, loaded
    through the layerwise session (many buckets) or directly (one)."""
    from actor.rollout_worker import RolloutWorker
    from bench.learner.perturb import PerturbableLearner

    rollout = RolloutConfig(
        batch_size=8, group_size=8, max_new_tokens=8, kv_cache_gib=0.1, engine_process="separate"
    )
    worker = RolloutWorker(tiny_model_path, rollout, ModelConfig(max_model_len=128))
    try:
        assert type(worker.llm.llm_engine.engine_core).__name__ == "SyncMPClient"
        learner = PerturbableLearner(
            tiny_model_path, LearnerConfig(num_cpus=1), bucket_bytes=16 << 10
        )
        sample = _sample(worker, "# Return the number 6.\n", "6 * 7\nprint(answer())")
        _push_perturbed(worker, learner, sample, seed=5, more_buckets_than=5)
        learner.sender.bucket_bytes = 16 << 20  # one bucket: the direct load, in that process
        _push_perturbed(worker, learner, sample, seed=6)
        assert worker.update_weights(learner.export_weights())["direct_load"] == 1.0
    finally:
        worker.llm.llm_engine.engine_core.shutdown()


def test_sampled_logprobs_are_tagged_and_match_the_learner(engine_and_learner):
    from common.types import RolloutRequest

    worker, learner = engine_and_learner
    prompt = tuple(worker.tokenizer("# Return the number 5.\n")["input_ids"])
    completions = worker.generate([RolloutRequest("r", prompt, seeds=(1, 2, 3, 4))])
    assert [c.sample_index for c in completions] == [0, 1, 2, 3]
    assert all(c.weight_version == worker.weight_version for c in completions)
    assert len({tuple(c.token_ids) for c in completions}) > 1, "distinct seeds, distinct samples"
    samples = [
        TrainSample(list(prompt), c.token_ids, c.sampler_logprobs, 0.0, c.weight_version)
        for c in completions
    ]
    learner_logprobs = learner.score(samples)
    for completion, mine in zip(completions, learner_logprobs, strict=True):
        assert _mean_abs_diff(completion.sampler_logprobs, mine) < BF16_TOLERANCE


def test_lora_adapter_push_reaches_the_engine(tiny_model_path, tmp_path):
    """lora.export = "adapter": only the adapter travels; vLLM serves it under a new id."""
    from actor.rollout_worker import RolloutWorker
    from bench.learner.perturb import PerturbableLearner
    from common.config import LoraConfig

    lora = LoraConfig(enabled=True, rank=8, export="adapter")
    learner = PerturbableLearner(
        tiny_model_path, LearnerConfig(num_cpus=1, lora=lora), adapter_dir=str(tmp_path)
    )
    rollout = RolloutConfig(batch_size=8, group_size=8, max_new_tokens=8, kv_cache_gib=0.1)
    worker = RolloutWorker(
        tiny_model_path,
        rollout,
        ModelConfig(max_model_len=128),
        lora_rank=lora.rank,
        transport="lora_adapter",
    )
    sample = _sample(
        worker, "# Return the number 6.\ndef answer():\n    return ", "6 + 1\nprint(answer())"
    )
    # the perturbation moves lora_A and lora_B off their init
    update = _push_perturbed(worker, learner, sample, seed=3)
    assert update.transport == "lora_adapter" and update.num_bytes > 0
    del worker


def test_push_benchmark_prints_one_row_per_bucket_size(tiny_model_path, capsys):
    from bench.launch.push import main

    assert main(["--model", tiny_model_path, "--bucket-mib", "1", "8", "--pushes", "3"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].split() == [
        "bucket",
        "MiB",
        "buckets",
        "update",
        "MiB",
        "export",
        "ms",
        "load",
        "ms",
    ]
    assert [line.split()[0] for line in lines[1:]] == ["1", "8"]
    assert all(float(line.split()[-1]) > 0 for line in lines[1:])  # a load took time


def test_push_benchmark_through_ray_reports_the_drivers_wait(tiny_model_path, capsys):
    import ray

    from bench.launch.push import main

    ray.shutdown()  # its own local cluster, not one an earlier test left in this process
    args = ["--model", tiny_model_path, "--bucket-mib", "1", "--pushes", "3", "--through-ray"]
    assert main(args) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].split()[-8:] == ["load", "ms", "dispatch", "ms", "reply", "ms", "push", "ms"]
    load, dispatch, reply, push = (float(x) for x in lines[1].split()[-4:])
    # each push's wait contains that push's engine load, so their medians keep the order; the
    # engine starts loading only after the driver saw the update and called it
    assert 0 < load <= push
    assert 0 < dispatch <= push
    assert reply >= 0
    assert not ray.is_initialized()


def test_push_benchmark_refuses_too_few_pushes(capsys):
    from bench.launch.push import main

    assert main(["--model", "unused", "--pushes", "2"]) == 2
    assert "--pushes must be at least 3" in capsys.readouterr().err
