"""The reference policy pi_ref of the KL term, in the form that costs least memory.

Reference logprobs are computed once per batch, before any gradient step, and reused by every
micro-batch and inner epoch. Where the reference weights live depends on the policy:

- LoRA: the base model with the adapter switched off. No second copy exists at all.
- Full fine-tuning, ``reference = "frozen_copy"``: a frozen deep copy on the learner's device.
  Fastest; costs one extra copy of the weights in accelerator memory.
- Full fine-tuning, ``reference = "precomputed"``: the *initial* trainable weights are kept on
  CPU only and swapped into the policy's own parameters for the batch's reference pass.
  Accelerator memory holds one copy of the weights; the price is two host<->device copies of
  the weights per step and 2x the weights in host memory. Parameters keep their identity, so
  the optimiser and its state are unaffected.

``learner.reference_dtype``: a frozen copy or the CPU copy of the initial weights may be kept in
bfloat16 while the policy keeps float32 master weights (the KL term's difference, measured:
tests/unit/learner/test_reference.py).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Literal

import torch
from torch import nn

ReferenceMode = Literal["frozen_copy", "precomputed"]


class InitialWeights:
    """A CPU copy of the policy's trainable parameters (in ``dtype``, by default theirs),
    swappable into the policy in place."""

    def __init__(self, model: nn.Module, dtype: torch.dtype | None = None) -> None:
        self._pairs = [
            (param, param.detach().to("cpu", dtype=dtype or param.dtype, copy=True))
            for param in model.parameters()
            if param.requires_grad
        ]

    @contextlib.contextmanager
    def swapped_in(self) -> Iterator[None]:
        """Within the block the policy holds its initial weights; afterwards, its current ones."""
        with torch.no_grad():
            current = [param.detach().to("cpu", copy=True) for param, _ in self._pairs]
            for param, initial in self._pairs:
                param.copy_(initial)
        try:
            yield
        finally:
            with torch.no_grad():
                for (param, _), saved in zip(self._pairs, current, strict=True):
                    param.copy_(saved)


def frozen_copy(policy: nn.Module, dtype: torch.dtype | None = None) -> nn.Module:
    """A deep copy of ``policy`` for inference, its parameters in ``dtype`` (default: theirs).

    Each parameter is cast as it is copied, so a float32 policy never has a whole float32 copy
    beside it on the device; tied parameters stay tied (one object, copied once), and buffers
    (rotary frequencies) keep their dtype.
    """
    memo: dict[int, object] = {
        id(param): nn.Parameter(param.detach().to(dtype or param.dtype, copy=True), False)
        for param in policy.parameters()
    }
    return copy.deepcopy(policy, memo).eval().requires_grad_(False)


class Reference:
    """``with reference.active() as model`` runs pi_ref. ``frozen``: the frozen copy, when the
    caller built it, by default a copy of ``policy``; ``dtype``: the reference's own weights'."""

    def __init__(
        self,
        policy: nn.Module,
        mode: ReferenceMode,
        lora: bool,
        frozen: nn.Module | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        if mode not in ("frozen_copy", "precomputed"):
            raise ValueError(f"unknown reference {mode!r}; use frozen_copy or precomputed")
        self.policy = policy
        self.mode: str = "lora_base" if lora else mode
        self._frozen: nn.Module | None = None
        self._initial: InitialWeights | None = None
        if self.mode == "frozen_copy":
            self._frozen = frozen if frozen is not None else frozen_copy(policy, dtype)
        elif self.mode == "precomputed":
            self._initial = InitialWeights(policy, dtype)

    @property
    def frozen(self) -> nn.Module | None:
        """The frozen copy the reference runs on, else None (it runs on the policy's modules)."""
        return self._frozen

    @contextlib.contextmanager
    def active(self) -> Iterator[nn.Module]:
        """Yield a module whose forward pass is the reference policy (eval mode, no grad)."""
        if self._frozen is not None:
            yield self._frozen
            return
        was_training = self.policy.training
        self.policy.eval()
        try:
            if self._initial is not None:
                with self._initial.swapped_in():
                    yield self.policy
            else:
                with self.policy.disable_adapter():
                    yield self.policy
        finally:
            self.policy.train(was_training)
