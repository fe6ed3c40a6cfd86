"""``bench.learner``'s per-phase memory: the phases of a real step, found from outside the learner.

CUDA's counters are replaced by a fake allocator whose level each test moves, so the phase
boundaries and the bookkeeping run on CPU; CUDA's numbers themselves need a GPU
(docs/benchmarks.md). The CPU's counter (live tensor bytes) is checked against allocations of
known sizes.
"""

from __future__ import annotations

import gc

import pytest
import torch
from torch._dynamo.source import ConstantSource
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv

from bench.learner.live_bytes import LiveTensorBytes
from bench.learner.phases import PhaseMemory, instrument
from bench.learner.step import build_random_model, random_batch
from common.config import LearnerConfig, LoraConfig, LossConfig
from learner.learner import Learner


class FakeAllocator:
    """A peak counter over a settable level: ``reset`` restarts the peak at the level."""

    def __init__(self) -> None:
        self.level = self.high = 0

    def set(self, level: int) -> None:
        self.level, self.high = level, max(self.high, level)

    def reset(self) -> None:
        self.high = self.level

    def peak(self) -> int:
        return self.high


def test_each_phase_reports_the_peak_inside_it_and_overall_keeps_the_largest():
    memory = FakeAllocator()
    memory.set(50)  # the model, before any phase
    recorder = PhaseMemory(memory.reset, memory.peak)
    memory.set(10)
    recorder.enter("policy_forward")
    memory.set(30)
    memory.set(20)
    recorder.enter("backward")
    memory.set(25)
    recorder.enter("policy_forward")  # a second micro-batch, lower than the first
    memory.set(22)
    recorder.close()
    assert recorder.peaks == {"policy_forward": 30, "backward": 25}
    assert recorder.overall == 50 and recorder.gib()["backward"] == 25 / 2**30


def test_a_held_phase_keeps_what_it_calls():
    memory = FakeAllocator()
    recorder = PhaseMemory(memory.reset, memory.peak)

    def reference():
        recorder.enter("policy_forward")  # ignored: the reference runs the same code
        memory.set(7)
        return "ref"

    assert recorder.hold("reference_forward", reference)() == "ref"
    recorder.close()
    assert recorder.sequence == ["reference_forward", "other"]
    assert recorder.peaks["reference_forward"] == 7


@pytest.mark.parametrize(("lora", "share_prompts"), [(False, False), (True, False), (False, True)])
def test_a_step_runs_reference_forward_head_backward_then_the_optimiser(
    tmp_path, lora, share_prompts
):
    """Two micro-batches: the reference once, each micro-batch's three phases, one optimiser
    step; under LoRA the reference runs the policy's own layers, whose marks it holds. Shared
    prompts run the layers twice in a micro-batch where sharing saves work."""
    path = str(build_random_model("tiny", tmp_path))
    lora_config = LoraConfig(enabled=lora)
    config = LearnerConfig(micro_batch_tokens=32, lora=lora_config, share_prompts=share_prompts)
    learner = Learner(path, config, loss=LossConfig(beta=0.04))
    memory = FakeAllocator()
    recorder = PhaseMemory(memory.reset, memory.peak)
    instrument(learner, recorder)
    samples = random_batch(2, 2, 4, 8, vocab=256)
    learner.train_step(samples)
    recorder.close()
    micro_batches = len(learner.ranks.plan(samples, 32, learner.share_prompts).micro_batches)
    assert micro_batches == 2 and learner.share_prompts == share_prompts
    # a micro-batch whose prompts are shared runs the layers twice: prompts, then completions
    sequence = " ".join(recorder.sequence).replace(
        "policy_forward lm_head policy_forward", "policy_forward"
    )
    assert sequence.split() == [
        "reference_forward",
        "other",
        *["policy_forward", "lm_head", "backward"] * micro_batches,
        "optimizer_step",
        "other",
    ]
    assert share_prompts == (len(recorder.sequence) > len(sequence.split()))


@pytest.fixture
def no_collection():
    """The counter sees frees as they happen; a garbage collection of earlier tests' tensors in
    the middle of a test would move the level by bytes the test does not own."""
    gc.collect()
    gc.disable()
    yield
    gc.enable()


def test_live_tensor_bytes_count_a_known_allocation_pattern_exactly(no_collection):
    held = torch.empty(1000)  # 4000 B alive before counting: counted from the start
    recorder = PhaseMemory.live_tensors(torch.device("cpu"))
    base = recorder.before
    with recorder.counting():
        recorder.enter("policy_forward")
        a = torch.empty(2000, dtype=torch.bfloat16)  # +4000
        b = torch.ones(100, 10)  # +4000
        view = b[:5].t()  # a view: no storage of its own
        del b, view  # -4000
        recorder.enter("backward")
        c = torch.empty(250, dtype=torch.float64)  # +2000 over the 4000 of a
        del a, held  # -8000
        recorder.enter("optimizer_step")
        s = torch.empty(0)
        s.untyped_storage().resize_(800)  # +800 (not an operator: counted at the resize)
        recorder.close()
    assert recorder.peaks["policy_forward"] - base == 8000
    assert recorder.peaks["backward"] - base == 4000 + 2000
    assert recorder.peaks["optimizer_step"] - base == 2000 - 4000 + 800  # held and a freed
    del c, s


def test_live_tensor_bytes_count_what_autograd_saves_and_the_gradients(no_collection):
    weight = torch.nn.Parameter(torch.ones(1000))  # 4000 B, counted from the start
    counter = LiveTensorBytes()
    with counter:
        base = counter.live
        y = (weight * 2).exp()  # the product (freed) and exp's output (saved for backward)
        assert counter.high - base == 8000
        total = y.sum()
        del y
        assert counter.live - base == 4000 + 4  # exp's output lives on in the graph
        total.backward()
        del total  # the graph and its saved output go; the gradient stays
        assert counter.live - base == 4000 and weight.grad.nbytes == 4000


def test_fake_tensors_alive_from_an_earlier_compile_are_not_counted():
    """torch.compile leaves FakeTensors of symbolic sizes in the process (the whole unit tier
    runs in one); counting one made the peak a SymInt, which the bench could not print."""
    shapes = ShapeEnv()
    symbol = shapes.create_symbol(10, ConstantSource("rows"), dynamic_dim=DimDynamic.DYNAMIC)
    with FakeTensorMode(shape_env=shapes):
        fake = torch.empty(shapes.create_symintnode(symbol, hint=10))
    with LiveTensorBytes() as counter:
        real = torch.ones(1000)
    assert isinstance(counter.peak(), int) and counter.peak() >= real.nbytes
    del fake
