"""The learner role: the ``Learner`` actor that trains the policy, and the parts it is built of.

- ``learner``: the ``Learner`` class, the actor's face (plain; made a Ray actor by the
  launcher): construction and the calls the driver and the weight transport make.
- ``step``: one train step (``Trainer``): micro-batches, the GRPO loss (``algorithm.loss``),
  gradient accumulation, AdamW and its learning rate.
- ``epochs``: mu inner epochs and mini-batches over one rollout batch; the step's metrics.
- ``schedule``: the learning rate of every optimiser step (warmup, then decay).
- ``batching``: samples to right-padded micro-batches under a token budget.
- ``logprobs``: completion-token logprobs without materialising full logits.
- ``policy``: building the policy (dtype / mixed precision, checkpointing, LoRA, compiled
  layers) and finding its parts.
- ``reference``: where the KL reference lives (LoRA base, frozen copy, initial weights on CPU).
- ``sharding``: learner ranks (FSDP2) and how a step's micro-batches are dealt among them.
- ``export``: HF-named, LoRA-merged weights for the rollout engines.
- ``checkpoint``: checkpoints, resume (full model or LoRA adapter), LoRA adapter export.
- ``flops``: model FLOPs of a step and the matmul peak they are measured against.
- ``threads``: the torch threads a rollout sharing the learner's cores asks for.

The loss math and advantages are the algorithm's (``algorithm.loss``, ``algorithm.advantage``);
the loss functions are re-exported below beside what the learner runs them on. Importing this
package needs only torch; transformers and peft load when a ``Learner`` is built.
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
