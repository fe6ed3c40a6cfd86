"""learner.num_ranks: two gloo processes sharding the policy with FSDP2 compute the update one
learner computes on the same batch, and a two-rank checkpoint resumes."""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from common.config import LearnerConfig, LoraConfig, LossConfig
from common.rendezvous import LOOPBACK, GroupStore, interface_of
from common.types import ProcessGroupSpec
from learner import logprobs
from learner.batching import sample_length
from learner.learner import Learner
from learner.sharding import Ranks
from tests.unit.learner.helpers import grouped_samples, tiny_samples

# AdamW divides each element's update by that element's gradient magnitude plus eps, so with a
# tiny eps an element whose gradient is rounding noise (the key bias's is zero in exact
# arithmetic) moves by +-lr on the noise's sign, in any two runs that sum in another order.
# eps = 1e-4 bounds that amplification: a gradient rounding difference d moves an update by
# at most lr * d / eps, ~1e-8 here for fp32 gradients of ~1e-2.
_BASE = {"lr": 1e-3, "micro_batch_tokens": 24, "num_cpus": 1, "adam_eps": 1e-4}


@dataclass(frozen=True)
class Configs:
    """A learner's section and the loss it trains (``[algorithm.loss]``)."""

    learner: LearnerConfig
    loss: LossConfig


def _config(**overrides) -> Configs:
    """``_BASE`` with ``overrides``, each to the section that has its key."""
    loss = {key: overrides.pop(key) for key in list(overrides) if key in LossConfig.model_fields}
    return Configs(LearnerConfig(**{**_BASE, **overrides}), LossConfig(**loss))


def _learner(model_path: str, config: Configs, **options) -> Learner:
    return Learner(model_path, config.learner, loss=config.loss, **options)


def _long_rows(seed: int) -> list:
    """12 rows of 9 tokens or more: under ``micro_batch_tokens = 16`` each is a micro-batch of
    its own on one rank or two, so both runs compute the same products. In bf16 a row's
    numbers depend on the rows beside it in its micro-batch (the products' blocking): one
    learner packed at 16, 24 or 10,000 tokens moved the weights by up to 1.7e-4 and the loss
    by up to 8.5e-4 relative (2026-11-27), where the ranks deal rows before packing them."""
    return [s for s in tiny_samples(60, seed=seed) if sample_length(s) >= 9][:12]


#: Each job's batch by the step number (a resumed run sees the same batches): random rows;
#: G = 3 rows per prompt, so the ranks run shared prompts (learner.share_prompts); long rows.
BATCHES = {
    "rows": lambda seed: tiny_samples(12, seed=seed),
    "grouped": lambda seed: grouped_samples(4, 3, seed=seed),
    "long_rows": _long_rows,
}


def _steps(learner: Learner, steps: int, batch: str = "rows") -> list[dict]:
    return [learner.train_step(BATCHES[batch](learner.step)) for _ in range(steps)]


@dataclass(frozen=True)
class TwoRankJob:
    """One run of the two ranks: ``steps`` train steps of ``config``, from the base model or a
    checkpoint (``resume``), saving one (``save``) at the end."""

    name: str
    config: Configs
    steps: int = 1
    batch: str = "rows"
    save: str | None = None
    resume: str | None = None


def _rank_main(rank, world, jobs, addresses, model_path, out_dir) -> None:
    """Rank ``rank`` of every job, in order, each in a process group of its own (one store
    each): a fresh Learner per job, so the jobs share nothing but the process (the imports and
    spawn that cost seconds), and a job may resume the checkpoint an earlier one saved."""
    try:
        for job, address in zip(jobs, addresses, strict=True):
            group = ProcessGroupSpec(address, rank, world, interface=interface_of(LOOPBACK))
            learner = _learner(
                model_path, job.config, export_dtype="float32", group=group, resume_from=job.resume
            )
            metrics = _steps(learner, job.steps, job.batch)
            weights = learner.export_tensors()  # a collective: every rank gathers
            dtypes = _dtypes(learner)
            if job.save:
                learner.save_checkpoint(job.save)
            if rank == 0:
                result = {"metrics": metrics, "weights": weights, "dtypes": dtypes}
                torch.save(result, f"{out_dir}/{job.name}.pt")
            learner.ranks.close()
    except BaseException:
        traceback.print_exc()
        raise


def _two_ranks(out_dir: Path, model_path: str, jobs: list[TwoRankJob]) -> dict[str, dict]:
    """Rank 0's metrics (floats) and gathered weights (tensors) of each job, by name."""
    stores = [GroupStore(LOOPBACK) for _ in jobs]  # the ranks' stores, served here meanwhile
    addresses = [store.address for store in stores]
    mp.spawn(_rank_main, args=(2, jobs, addresses, model_path, str(out_dir)), nprocs=2, join=True)
    return {job.name: torch.load(out_dir / f"{job.name}.pt", weights_only=True) for job in jobs}


def _dtypes(learner: Learner) -> dict[str, list[str]]:
    """The dtypes the learner holds its frozen and its trained parameters in."""
    params = list(learner.model.parameters())
    return {
        "frozen": sorted({str(p.dtype) for p in params if not p.requires_grad}),
        "trained": sorted({str(p.dtype) for p in params if p.requires_grad}),
    }


def _one_rank(model_path, config, steps=1, batch="rows") -> dict:
    learner = _learner(model_path, config, export_dtype="float32")
    return {"metrics": _steps(learner, steps, batch), "weights": learner.export_tensors()}


def _assert_trained(model_path: str, config: Configs, want: dict) -> None:
    """The one-learner run a test compares with moved some weight from the model's."""
    before = _learner(model_path, config, export_dtype="float32").export_tensors()
    moved = [n for n, t in want["weights"].items() if not torch.equal(t, before[n])]
    assert moved, "the reference run did not train"


def _assert_same_update(got: dict, want: dict) -> None:
    # Two ranks sum the same micro-batch gradients in another order: fp32 rounding moves the
    # updates by ~1e-8 (see _BASE); a lost or doubly counted micro-batch moves most elements
    # by 1e-5 or more, and a gradient scaled by 2 (an average where a sum belongs) shows in
    # the gradient norm.
    assert got["weights"].keys() == want["weights"].keys()
    for name, tensor in want["weights"].items():
        torch.testing.assert_close(got["weights"][name], tensor, rtol=0, atol=1e-6, msg=name)
    for got_step, want_step in zip(got["metrics"], want["metrics"], strict=True):
        for key in ("train/loss", "train/kl", "train/grad_norm", "train/logprob_diff_mean"):
            assert got_step[key] == pytest.approx(want_step[key], rel=1e-5, abs=1e-7), key


UPDATES = {
    "plain": {},
    "frozen_reference": {"beta": 0.05},
    "epochs": {"ppo_epochs": 2, "mini_batches": 2, "beta": 0.05, "kl_in": "loss"},
    "lora": {"lora": LoraConfig(enabled=True, rank=4), "beta": 0.05},
    # FSDP2's hooks around a checkpointed layer's forward gather its shard for the recompute
    "checkpointed_layer": {"gradient_checkpointing": 1, "beta": 0.05},
}


@pytest.fixture(scope="module")
def two_rank_runs(tied_model, tmp_path_factory) -> dict[str, dict]:
    """Every two-rank run of this module, by job name, from one spawn of the two ranks (each
    spawn is seconds of imports and model loads): two steps of each of ``UPDATES`` and of
    rows that share prompts; one step saved as a checkpoint (``checkpoint``, which the next
    job resumes for one step: ``resumed``). The tests compare them with one learner."""
    out = tmp_path_factory.mktemp("two-ranks")
    checkpoint = str(out / "ckpt")
    jobs = [TwoRankJob(name, _config(**overrides), steps=2) for name, overrides in UPDATES.items()]
    jobs += [
        TwoRankJob("shared_prompts", _config(beta=0.05), steps=2, batch="grouped"),
        TwoRankJob("lora_bf16_base", _config(**BF16_BASE), steps=2, batch="long_rows"),
        TwoRankJob("checkpoint", _config(beta=0.05), save=checkpoint),
        TwoRankJob("resumed", _config(beta=0.05), resume=checkpoint),
    ]
    return {**_two_ranks(out, tied_model, jobs), "checkpoint_path": Path(checkpoint)}


@pytest.mark.parametrize("name", list(UPDATES))
def test_two_ranks_compute_the_single_learner_update(tied_model, two_rank_runs, name):
    config = _config(**UPDATES[name])
    want = _one_rank(tied_model, config, steps=2)
    got = two_rank_runs[name]
    _assert_trained(tied_model, config, want)
    _assert_same_update(got, want)


def test_two_ranks_share_prompts_and_compute_the_single_learner_update(tied_model, two_rank_runs):
    """Rows that share a prompt: each rank runs its prompts once (a group's rows are dealt to
    one rank together; the budget splits a group across micro-batches), and the gradients
    summed back into each prompt match one learner's."""
    config = _config(beta=0.05)
    assert _learner(tied_model, config).share_prompts
    want = _one_rank(tied_model, config, steps=2, batch="grouped")
    got = two_rank_runs["shared_prompts"]
    _assert_trained(tied_model, config, want)
    _assert_same_update(got, want)


#: A frozen bf16 LoRA base and float32 adapters: one FSDP2 unit holds both (it gathers a
#: unit of several dtypes as bytes; only the parameters that train must share one). Whole rows:
#: sharded ranks always run the shared-prompt forward (their collectives must pair: step.py),
#: one learner only where a prompt repeats; the same function, another bf16 rounding (2e-5
#: relative in the loss, measured, with a float32 base and without LoRA alike).
BF16_BASE = {
    "lora": LoraConfig(enabled=True, rank=4, base_dtype="bfloat16"),
    "dtype": "bfloat16",
    "beta": 0.05,
    "micro_batch_tokens": 16,
    "share_prompts": False,
}


def test_two_ranks_with_a_bf16_lora_base_compute_the_single_learner_update(
    tied_model, two_rank_runs, monkeypatch
):
    """The ranks keep the base in bf16 and train float32 adapters, and take the one learner's
    steps. The same bf16 products on both sides: the same rows in each micro-batch
    (``_long_rows``), and the same LM-head path (a sharded head runs through its module,
    lm_head.head_is_plain; one learner's plain head through the function that writes its
    gradient in place, whose bf16 rounding differs), so what differs is the sharding alone."""
    got = two_rank_runs["lora_bf16_base"]
    assert got["dtypes"] == {"frozen": ["torch.bfloat16"], "trained": ["torch.float32"]}
    monkeypatch.setattr(logprobs, "head_is_plain", lambda model, head: False)
    config = _config(**BF16_BASE)
    want = _one_rank(tied_model, config, steps=2, batch="long_rows")
    _assert_trained(tied_model, config, want)
    _assert_same_update(got, want)


def test_a_two_rank_checkpoint_resumes_the_run(tied_model, two_rank_runs):
    config = _config(beta=0.05)
    straight = _one_rank(tied_model, config, steps=2)
    ckpt = two_rank_runs["checkpoint_path"]
    files = {p.name for p in ckpt.iterdir()}
    assert {"config.json", "model.safetensors", "optimizer", "learner_state.json"} <= files
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(ckpt)  # the policy in HF format
    # Resumed on two ranks from step 1, the second step is the straight run's second step.
    resumed = two_rank_runs["resumed"]
    _assert_same_update(
        {"metrics": resumed["metrics"], "weights": resumed["weights"]},
        {"metrics": straight["metrics"][1:], "weights": straight["weights"]},
    )


def test_a_sharded_checkpoint_needs_its_rank_count(tied_model, two_rank_runs):
    with pytest.raises(ValueError, match="written by several learner ranks"):
        _learner(tied_model, _config(beta=0.05), resume_from=str(two_rank_runs["checkpoint_path"]))


def test_samples_are_dealt_by_tokens_and_micro_batches_padded():
    class _Rank(Ranks):
        def __init__(self, rank: int, size: int) -> None:
            self.rank, self.size = rank, size

    # longest first to the less loaded rank: 9 -> 0, 8 -> 1, 5 -> 1, 4 -> 0, 2 -> 0 (a tie)
    assert _Rank(0, 2).split([5, 8, 2, 9, 4]) == [[2, 3, 4], [0, 1]]
    packed = [[[0, 3]], [[1, 2], [4]]]
    # a weightless copy of one row keeps the count, at a row's compute
    assert _Rank(0, 2).deal(packed).micro_batches == [[0, 3], [0]]
    assert _Rank(0, 2).deal(packed).weights == [1.0, 0.0]
    assert _Rank(1, 2).deal(packed).weights == [1.0, 1.0]
    # Fewer samples than ranks: the idle rank runs a weightless copy of the first sample.
    idle = _Rank(1, 2).deal([[[0]], []])
    assert idle.micro_batches == [[0]] and idle.weights == [0.0]
