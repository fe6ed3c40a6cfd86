"""The learner role: GRPO loss math, chunked logprobs, and the ``Learner`` that trains the policy.

- ``grpo``: pure functions (KL estimators, TIS weights, the clipped loss); advantages are the
  driver's (``algorithm.advantage``).
- ``logprobs``: completion-token logprobs without materialising full logits.
- ``batching``: samples to right-padded micro-batches under a token budget.
- ``policy``: building the policy (dtype / mixed precision, checkpointing, LoRA).
- ``reference``: where the KL reference lives (LoRA base, frozen copy, initial weights on CPU).
- ``epochs``: mu inner epochs and mini-batches over one rollout batch.
- ``export``: HF-named, LoRA-merged weights for the rollout engines.
- ``checkpoint``: checkpoints, resume (full model or LoRA adapter), versioned adapter export.
- ``learner``: the ``Learner`` class (plain; made a Ray actor by the launcher).

Importing this package needs only torch; transformers and peft load when a ``Learner`` is built.
"""

from algorithm.loss import grpo_loss, kl_divergence, sequence_kl, tis_weights
from learner.learner import Learner
from learner.logprobs import completion_logprobs

__all__ = [
    "Learner",
    "completion_logprobs",
    "grpo_loss",
    "kl_divergence",
    "sequence_kl",
    "tis_weights",
]
