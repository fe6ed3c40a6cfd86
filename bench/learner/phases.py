"""Where a learner step's memory peaks: the peak of each phase, for ``python -m bench.learner``.

A step's phases, in order: the reference's forward (beta > 0), and per micro-batch the policy's
forward through the decoder layers, the LM head and log-softmax (``logprobs.py``), then the loss
and the backward pass; finally the optimiser step. Each phase starts by resetting the device's
peak counter and ends by reading it, so a phase's number is the most memory allocated at any
moment inside it (what was already allocated when it began included): the phase with the
largest number is the one that sets the step's peak. A phase that occurs several times (one per
micro-batch, one per step) reports its largest.

The boundaries are found from outside the learner: the trainer's methods are wrapped on the
instance and a forward hook marks the end of the decoder layers, so the learner's code carries
no bench instrumentation. The counters are CUDA's (``torch.cuda.reset_peak_memory_stats``,
``max_memory_allocated``) on a GPU; on CPU, which has no allocator counter, the bytes of live
tensors (``live_bytes.py``): the same phases and the same tensors, without what CUDA's counter
adds (kernel workspaces, 512-byte rounding) or what neither counts (the allocator's cache).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable

import torch
from torch import nn

from bench.learner.live_bytes import LiveTensorBytes
from learner.policy import base_model_of

#: Phases in the order a step runs them; "other" is the time between them (collation, the
#: metrics, the reference's swap-in for a precomputed reference).
PHASES = (
    "reference_forward",
    "old_policy_forward",
    "policy_forward",
    "lm_head",
    "backward",
    "optimizer_step",
    "other",
)


class PhaseMemory:
    """The peak of each phase, from a counter that ``reset`` restarts at the memory allocated
    now and ``peak`` reads (bytes); the steps to measure run inside :meth:`counting`."""

    def __init__(
        self,
        reset: Callable[[], None],
        peak: Callable[[], int],
        counting: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
        eager_optimizer: bool = False,
    ) -> None:
        self._reset, self._peak, self.counting = reset, peak, counting
        #: run the optimiser's own ``torch.compile`` eagerly (see :meth:`live_tensors`)
        self.eager_optimizer = eager_optimizer
        self.before = peak()  # building the model and anything before the first phase
        self.peaks: dict[str, int] = {}
        self.sequence: list[str] = []  # every phase entered, in order (for tests)
        self._phase: str | None = None
        self._held = 0

    @classmethod
    def cuda(cls, device: torch.device) -> PhaseMemory:
        return cls(
            lambda: torch.cuda.reset_peak_memory_stats(device),
            lambda: torch.cuda.max_memory_allocated(device),
        )

    @classmethod
    def live_tensors(cls, device: torch.device) -> PhaseMemory:
        """The bytes of live tensors on ``device`` (any device; the bench uses it on CPU).

        The counter is a dispatch mode, which dynamo refuses to trace under: torchao's
        low-precision AdamW compiles its step with ``fullgraph=True`` and failed, so the
        optimiser step runs eagerly here, its temporaries counted op by op."""
        counter = LiveTensorBytes(device)
        with counter:  # counts the model, the reference and the optimiser already built
            pass
        return cls(counter.reset, counter.peak, lambda: counter, eager_optimizer=True)

    def enter(self, phase: str) -> None:
        """End the current phase and begin ``phase``; ignored inside a held phase (the
        reference's forward calls the same methods as the policy's)."""
        if self._held or phase == self._phase:
            return
        self.close()
        self._phase = phase
        self.sequence.append(phase)
        self._reset()

    def close(self) -> None:
        """End the current phase, recording its peak."""
        if self._phase is not None:
            self.peaks[self._phase] = max(self.peaks.get(self._phase, 0), self._peak())
        self._phase = None

    def hold(self, phase: str, fn: Callable) -> Callable:
        """``fn`` wrapped as one phase, whatever it calls; "other" after it."""

        @functools.wraps(fn)
        def held(*args, **kwargs):
            self.enter(phase)
            self._held += 1
            try:
                return fn(*args, **kwargs)
            finally:
                self._held -= 1
                self.enter("other")

        return held

    @property
    def overall(self) -> int:
        """The largest allocation seen, before the phases and in them (bytes)."""
        return max([self.before, *self.peaks.values()])

    def gib(self) -> dict[str, float]:
        """Each phase's peak in GiB, in the order of :data:`PHASES`."""
        return {name: self.peaks[name] / 2**30 for name in PHASES if name in self.peaks}


def instrument(learner, recorder: PhaseMemory) -> None:
    """Mark ``learner``'s phases on ``recorder`` from now on (see the module docstring)."""
    trainer = learner.trainer
    trainer.reference_logprobs = recorder.hold("reference_forward", trainer.reference_logprobs)
    trainer.policy_logprobs = recorder.hold("old_policy_forward", trainer.policy_logprobs)
    step = trainer.optimizer_step
    if recorder.eager_optimizer:
        step = _eager(step)
    trainer.optimizer_step = recorder.hold("optimizer_step", step)
    logprobs = trainer.logprobs

    @functools.wraps(logprobs)
    def policy_logprobs(*args, **kwargs):
        recorder.enter("policy_forward")
        result = logprobs(*args, **kwargs)
        recorder.enter("backward")  # the loss, then its backward pass, until the next phase
        return result

    trainer.logprobs = policy_logprobs
    # With shared prompts the layers run twice per micro-batch (the prompts, then the
    # completions on their cache): each run is the forward, what follows the last the head.
    stack = _decoder_stack(learner.model)
    stack.register_forward_pre_hook(lambda *_: recorder.enter("policy_forward"))
    stack.register_forward_hook(lambda *_: recorder.enter("lm_head"))


def _eager(fn: Callable) -> Callable:
    """``fn`` with every ``torch.compile`` inside it run as plain eager code."""

    @functools.wraps(fn)
    def eager(*args, **kwargs):
        with torch.compiler.set_stance("force_eager"):
            return fn(*args, **kwargs)

    return eager


def _decoder_stack(model: nn.Module) -> nn.Module:
    """The module that runs the embedding and the decoder layers (``model.model`` in HF's
    causal LMs): its forward's end is where the LM head begins."""
    base = base_model_of(model)
    return getattr(base, getattr(base, "base_model_prefix", "model"))
