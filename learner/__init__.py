"""The learner role: GRPO loss math, chunked logprobs, and the ``Learner`` that trains the policy.

- ``grpo``: pure functions (group advantages, KL estimators, the clipped loss).
- ``logprobs``: completion-token logprobs without materialising full logits.
- ``batching``: samples to right-padded micro-batches under a token budget.
- ``export``: HF-named, LoRA-merged weights for the rollout engines.
- ``learner``: the ``Learner`` class (plain; made a Ray actor by the launcher).

Importing this package needs only torch; transformers and peft load when a ``Learner`` is built.
"""

from learner.grpo import group_advantages, grpo_loss, kl_divergence, zero_std_fraction
from learner.learner import Learner
from learner.logprobs import completion_logprobs

__all__ = [
    "Learner",
    "completion_logprobs",
    "group_advantages",
    "grpo_loss",
    "kl_divergence",
    "zero_std_fraction",
]
