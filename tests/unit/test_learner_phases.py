"""``learner.bench``'s per-phase memory: the phases of a real step, found from outside the learner.

CUDA's counters are replaced by a fake allocator whose level each test moves, so the phase
boundaries and the bookkeeping run on CPU; the numbers themselves need a GPU (docs/benchmarks.md).
"""

from __future__ import annotations

import pytest

from common.config import LearnerConfig, LoraConfig
from learner.bench.phases import PhaseMemory, instrument
from learner.bench.step import build_random_model, random_batch
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
    config = LearnerConfig(
        beta=0.04, micro_batch_tokens=32, lora=lora_config, share_prompts=share_prompts
    )
    learner = Learner(path, config)
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
