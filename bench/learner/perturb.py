"""A learner whose weights move without training: a new policy to push for the weight-push
benchmark and the tests that check a push reaches the engines (trained steps move the weights
too little, and too slowly, to tell two versions apart)."""

from __future__ import annotations

import torch

from learner.learner import Learner


class PerturbableLearner(Learner):
    """:class:`Learner` plus :meth:`perturb_weights_`."""

    @torch.no_grad()
    def perturb_weights_(self, scale: float, seed: int) -> None:
        """Add N(0, scale^2) noise to every trainable parameter; like a train step, this makes
        a new weight version."""
        generator = torch.Generator().manual_seed(seed)
        for param in self.trainable:
            noise = torch.randn(param.shape, generator=generator, dtype=torch.float32)
            param.add_(noise.to(device=param.device, dtype=param.dtype) * scale)
        self._weight_version += 1
