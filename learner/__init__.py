"""The learner role: GRPO loss math, chunked logprobs, and the ``Learner`` that trains the policy.

- ``grpo``: pure functions (group advantages, KL estimators, the clipped loss).
- ``logprobs``: completion-token logprobs without materialising full logits.
- ``batching``: samples to right-padded micro-batches under a token budget.
- ``sampling``: dynamic sampling (drop zero-variance groups, resample), pure; used by the driver.
- ``policy``: building the policy (dtype / mixed precision, checkpointing, LoRA).
- ``reference``: where the KL reference lives (LoRA base, frozen copy, initial weights on CPU).
- ``epochs``: mu inner epochs and mini-batches over one rollout batch.
- ``export``: HF-named, LoRA-merged weights for the rollout engines.
- ``checkpoint``: checkpoints, resume (full model or LoRA adapter), versioned adapter export.
- ``learner``: the ``Learner`` class (plain; made a Ray actor by the launcher).

Importing this package needs only torch; transformers and peft load when a ``Learner`` is built.
"""

from learner.grpo import (
    group_advantages,
    grpo_loss,
    kl_divergence,
    kl_penalised_rewards,
    sequence_kl,
    tis_weights,
    zero_std_fraction,
)
from learner.learner import Learner
from learner.logprobs import completion_logprobs
from learner.sampling import GroupAccumulator, dynamic_sample, is_informative

__all__ = [
    "GroupAccumulator",
    "Learner",
    "completion_logprobs",
    "dynamic_sample",
    "group_advantages",
    "grpo_loss",
    "is_informative",
    "kl_divergence",
    "kl_penalised_rewards",
    "sequence_kl",
    "tis_weights",
    "zero_std_fraction",
]
