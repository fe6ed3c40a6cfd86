"""One train step: micro-batches, the GRPO loss (``algorithm/loss.py``), gradient accumulation,
the optimiser and its LR.

One ``train_step`` = ``ppo_epochs`` x ``mini_batches`` optimiser steps over one scored batch
(default 1 x 1: GRPO with mu = 1). Every optimiser step splits its samples into micro-batches by
a padded-token budget and normalises each micro-batch's loss by the whole step's counts, so the
accumulated gradient is the full-batch gradient; then the gradient is clipped and the optimiser
steps at the schedule's learning rate. Reference logprobs are computed once per batch before the
first step. With mu = 1 and one mini-batch pi_old is the policy's own logprobs detached (no extra
forward pass); otherwise it is computed once, without gradient, before the first epoch.

Every pass over samples, with gradient or without, runs through :meth:`Trainer.micro_batches`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import torch
from torch import Tensor, nn
from torch.nn.utils import clip_grad_norm_

from algorithm.loss import grpo_loss, length_normaliser
from common.config import LearnerConfig, LossConfig
from common.types import TrainSample
from learner import checkpoint
from learner.batching import MicroBatch, collate, completion_rows, validate_samples
from learner.epochs import MetricMeans, MicroBatchSums, split_mini_batches
from learner.logprobs import completion_logprobs
from learner.optimizers import build_optimizer, current_lr, set_lr
from learner.policy import autocast
from learner.reference import Reference
from learner.schedule import learning_rate
from learner.sharding import Ranks, call, full
from learner.threads import ComputeThreads


class Trainer:
    """This rank's train step over its policy: the passes, the loss, the optimiser and its LR.

    ``root`` is what forward passes run through (the FSDP root around ``model``, or ``model``);
    ``total_steps`` is the run's length in train steps, the horizon of a decaying learning rate.
    """

    def __init__(
        self,
        model: nn.Module,
        config: LearnerConfig,
        *,
        loss: LossConfig,
        root: nn.Module,
        reference: Reference | None,
        ranks: Ranks,
        device: torch.device,
        autocast_dtype: torch.dtype | None,
        threads: ComputeThreads,
        share_prompts: bool,
        temperature: float,
        pad_token_id: int,
        seed: int,
        total_steps: int,
        micro_batch_tokens: int,
        fused_head: bool,
    ) -> None:
        self.model, self.config, self.root, self.reference = model, config, root, reference
        self.loss = loss
        self.micro_batch_tokens = micro_batch_tokens  # fitted to memory: Learner._fit_memory
        self.fused_head = fused_head  # the LM head's softmax math compiled (head_kernels.py)
        self.ranks, self.device, self.autocast_dtype = ranks, device, autocast_dtype
        self.threads, self.share_prompts = threads, share_prompts
        self.temperature, self.pad_token_id, self.seed = temperature, pad_token_id, seed
        self.trainable = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = build_optimizer(self.trainable, config)
        self.steps_per_train_step = config.ppo_epochs * config.mini_batches
        self.total_optimizer_steps = total_steps * self.steps_per_train_step
        self.warmup_steps = config.warmup_steps or round(
            config.warmup_ratio * self.total_optimizer_steps
        )
        # The config cannot check this alone: the run's length comes from run.steps.
        if config.lr_schedule != "constant" and self.total_optimizer_steps <= self.warmup_steps:
            raise ValueError(
                f"lr_schedule = {config.lr_schedule!r} decays over the run: it needs the run's "
                f"length (run.steps, here {total_steps}) beyond its warmup"
            )
        self.optimizer_steps = 0

    def micro_batches(
        self,
        samples: Sequence[TrainSample],
        *,
        old_logprobs: Sequence[Tensor] | None = None,
        ref_logprobs: Sequence[Tensor] | None = None,
    ) -> Iterator[tuple[MicroBatch, float]]:
        """This rank's micro-batches of ``samples`` (``Ranks.plan``), collated on the device,
        each with its weight: 1, or 0 for a padding copy that only keeps the ranks' collectives
        in step. Before each, the training thread takes up the latest thread count."""
        deal = self.ranks.plan(samples, self.micro_batch_tokens, self.share_prompts)
        for indices, weight in zip(deal.micro_batches, deal.weights, strict=True):
            self.threads.apply()
            batch = collate(
                samples,
                indices,
                self.pad_token_id,
                self.device,
                old_logprobs=old_logprobs,
                ref_logprobs=ref_logprobs,
                temperature=self.temperature,
                share_prompts=self.share_prompts,
            )
            yield batch, weight

    def logprobs(
        self,
        batch: MicroBatch,
        model: nn.Module | None = None,
        return_entropy: bool = False,
        temperature: float | None = None,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """(B, T) completion logprobs of ``batch`` under ``model`` (default: the policy), and
        their entropies with ``return_entropy``: with a gradient only where the loss has an
        entropy bonus (``algorithm.loss.entropy_coef``), else a metric that keeps no graph."""
        if temperature is None:  # each row's own where samples have one, else the run's
            temperature = self.temperature if batch.temperatures is None else batch.temperatures
        runner = self.root if model is None or model is self.model else model
        prompts = batch.prompts
        if prompts is not None and not prompts.saves and not self.ranks.sharded:
            prompts = None  # ranks always take the same path, so that their collectives pair
        with autocast(self.device, self.autocast_dtype):
            return call(
                runner,
                completion_logprobs,
                batch.input_ids,
                batch.attention_mask,
                batch.completion_mask,
                temperature,
                chunk_tokens=self.config.logprob_chunk_tokens,
                return_entropy=return_entropy,
                prompts=prompts,
                entropy_grad=self.loss.entropy_coef > 0,
                fused_head=self.fused_head,
            )

    @torch.no_grad()
    def per_sample_logprobs(
        self, samples: Sequence[TrainSample], model: nn.Module, temperature: float | None = None
    ) -> list[Tensor]:
        """Logprobs of each sample's completion tokens under ``model``: 1-D CPU tensors (each
        rank computes its share, then every rank has them all)."""
        result: dict[int, Tensor] = {}
        for batch, weight in self.micro_batches(samples):
            logprobs = self.logprobs(batch, model, temperature=temperature)
            if weight:
                rows = completion_rows(logprobs, samples, batch.indices)
                result.update(zip(batch.indices, rows, strict=True))
        result = self.ranks.gather(result)
        return [result[i] for i in range(len(samples))]

    def policy_logprobs(
        self, samples: Sequence[TrainSample], temperature: float | None = None
    ) -> list[Tensor]:
        """See ``Learner.policy_logprobs``."""
        was_training = self.model.training
        self.model.eval()
        try:
            return self.per_sample_logprobs(samples, self.model, temperature)
        finally:
            self.model.train(was_training)

    def reference_logprobs(self, samples: Sequence[TrainSample]) -> list[Tensor]:
        """See ``Learner.reference_logprobs``."""
        if self.reference is None:
            raise ValueError("no reference policy: it is only built when beta > 0")
        with self.reference.active() as model:
            return self.per_sample_logprobs(samples, model)

    def accumulate_gradients(
        self,
        samples: Sequence[TrainSample],
        loss_beta: float,
        *,
        old_logprobs: Sequence[Tensor] | None = None,
        ref_logprobs: Sequence[Tensor] | None = None,
        max_len: int | None = None,
    ) -> dict[str, float]:
        """Forward + backward over all micro-batches, leaving the full-batch gradient in
        ``.grad``; see ``Learner.accumulate_gradients``."""
        validate_samples(samples)
        if ref_logprobs is None and loss_beta > 0:
            ref_logprobs = self.reference_logprobs(samples)
        self.model.train()
        total_tokens = sum(s.num_trained_tokens for s in samples)
        max_len = max_len or length_normaliser(self.loss, [s.num_trained_tokens for s in samples])
        sums = MicroBatchSums(total_tokens, len(samples))
        placed = self.micro_batches(samples, old_logprobs=old_logprobs, ref_logprobs=ref_logprobs)
        for batch, weight in placed:
            logprobs, entropy = self.logprobs(batch, return_entropy=True)  # (B, T) each
            old = batch.old_logprobs if batch.old_logprobs is not None else logprobs.detach()
            loss, metrics = grpo_loss(  # normalised by the whole step's counts
                logprobs,
                old,
                batch.advantages,
                batch.completion_mask,
                self.loss,
                beta=loss_beta,
                ref_logprobs=batch.ref_logprobs,
                entropy=entropy,
                sampler_logprobs=batch.sampler_logprobs,
                max_len=max_len,
                batch_num_sequences=len(samples),
                batch_num_tokens=total_tokens,
            )
            (loss * weight).backward()  # weight 0: a padding copy, for the ranks' collectives
            if weight:
                sums.add(batch, metrics, old, torch.get_num_threads())
        return sums.metrics(self.ranks, tis=self.loss.tis_cap > 0)

    @property
    def lr(self) -> float:
        """The learning rate of the next optimiser step."""
        config = self.config
        return learning_rate(
            self.optimizer_steps,
            config.lr,
            config.lr_schedule,
            self.warmup_steps,
            self.total_optimizer_steps,
            config.min_lr,
        )

    def optimizer_step(self) -> float:
        """Clip the accumulated gradient, step AdamW at the schedule's rate; the gradient norm."""
        self.threads.apply()
        grad_norm = full(clip_grad_norm_(self.trainable, self.config.max_grad_norm))
        set_lr(self.optimizer, self.lr)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.optimizer_steps += 1
        return float(grad_norm)

    def train(
        self, samples: Sequence[TrainSample], loss_beta: float, step: int
    ) -> dict[str, float]:
        """Train step ``step``'s optimiser steps on ``samples``; its ``train/*`` metrics."""
        self.optimizer.zero_grad(set_to_none=True)
        if self.steps_per_train_step == 1:
            metrics = self.accumulate_gradients(samples, loss_beta)
            metrics["train/grad_norm"] = self.optimizer_step()
        else:
            metrics = self._epochs(samples, loss_beta, step)
        metrics["train/lr"] = current_lr(self.optimizer)  # the step's last
        return metrics

    def _epochs(
        self, samples: Sequence[TrainSample], loss_beta: float, step: int
    ) -> dict[str, float]:
        """mu epochs of mini-batch steps against pi_old computed once (see ``epochs.py``)."""
        ref = self.reference_logprobs(samples) if loss_beta > 0 else None
        old = self.policy_logprobs(samples)
        max_len = length_normaliser(self.loss, [s.num_trained_tokens for s in samples])
        epochs = self.config.ppo_epochs
        every, last = MetricMeans(), MetricMeans()
        for epoch in range(epochs):
            seed = f"{self.seed}/{step}/{epoch}"
            for part in split_mini_batches(len(samples), self.config.mini_batches, seed):
                metrics = self.accumulate_gradients(
                    [samples[i] for i in part],
                    loss_beta,
                    old_logprobs=[old[i] for i in part],
                    ref_logprobs=None if ref is None else [ref[i] for i in part],
                    max_len=max_len,
                )
                metrics["train/grad_norm"] = self.optimizer_step()
                every.add(metrics)
                if epoch == epochs - 1:
                    last.add(metrics)
        result = every.means()
        for key in ("ratio_mean", "clip_frac", "loss"):
            result[f"train/{key}_last_epoch"] = last.means()[f"train/{key}"]
        result["train/num_tokens"] = float(sum(s.num_trained_tokens for s in samples))
        result["train/num_samples"] = float(len(samples))
        result["train/optimizer_steps"] = float(every.count)
        return result

    def restore(self, path: Path, state: dict) -> None:
        """Optimiser state and step count from checkpoint ``path`` (``state``: its learner
        state)."""
        checkpoint.load_optimizer(path, self.model, self.optimizer, self.device, self.ranks)
        self.optimizer_steps = int(state["optimizer_steps"])
        for group in self.optimizer.param_groups:  # the config's, not the checkpoint's
            group.update(
                betas=tuple(self.config.adam_betas),
                eps=self.config.adam_eps,
                weight_decay=self.config.weight_decay,
            )
