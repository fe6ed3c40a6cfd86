"""The learner: policy, optional reference, GRPO loss and optimiser.

A plain class so unit tests can build it without Ray; the launcher makes it an actor with
``ray.remote(num_cpus=..., num_gpus=...)(Learner)``. Everything that crosses its boundary is
plain data (``TrainSample`` in, metric dicts, paths and ``WeightUpdate`` out).

One ``train_step`` = ``ppo_epochs`` x ``mini_batches`` optimiser steps over one scored batch
(default 1 x 1: GRPO with mu = 1). Every optimiser step splits its samples into micro-batches by
a padded-token budget and normalises each micro-batch's loss by the whole step's counts, so the
accumulated gradient is the full-batch gradient; then the gradient is clipped and AdamW steps.
Reference logprobs (beta > 0 and ``kl_in = "loss"``) are computed once per batch before the
first step; see ``reference.py`` for where the reference weights live. With mu = 1 and one
mini-batch pi_old is the policy's own logprobs detached (no extra forward pass); otherwise it
is computed once, without gradient, before the first epoch (``epochs.py``).

The learner is the :class:`~common.transport.WeightSource` of the run's weight transport: its
sender reads the policy through ``export_tensors`` or ``save_adapter``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch
from torch import Tensor
from torch.nn.utils import clip_grad_norm_

from algorithm.kl_control import KlControl
from algorithm.loss import Aggregation, grpo_loss, sequence_kl
from common.config import LearnerConfig
from common.transport import DEFAULT_BUCKET_BYTES, transport_for
from common.types import ProcessGroupSpec, TrainSample, WeightUpdate
from learner import checkpoint
from learner.batching import (
    MicroBatch,
    collate,
    completion_rows,
    spans,
    validate_samples,
)
from learner.epochs import MetricMeans, MicroBatchSums, split_mini_batches
from learner.export import export_metadata, export_state_dict, iter_export
from learner.flops import forward_flops, model_config_shape, step_flops
from learner.logprobs import can_share_prompts, completion_logprobs
from learner.policy import (
    autocast,
    build_policy,
    compile_layers,
    load_causal_lm,
    load_tokenizer,
    precision,
    to_dtype,
)
from learner.reference import Reference
from learner.schedule import learning_rate
from learner.senders import make_sender
from learner.sharding import Deal, Ranks, call, full


class Learner:
    """Owns the policy and its optimiser; see the module docstring for the step's structure.

    ``export_dtype`` is the dtype the rollout engines serve in (``model.dtype``); by default the
    model config's ``dtype``, else bfloat16. ``total_steps`` is the run's length in train steps
    (``run.steps``): the horizon of a decaying learning rate and of a linear beta schedule.
    """

    def __init__(
        self,
        model_path: str,
        config: LearnerConfig,
        temperature: float = 1.0,
        seed: int = 0,
        transport: str = "cpu_safetensors",
        *,
        export_dtype: str | None = None,
        adapter_dir: str | None = None,
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
        total_steps: int = 0,
        group: ProcessGroupSpec | None = None,
        resume_from: str | None = None,
    ) -> None:
        from transformers import AutoConfig

        # torch compute threads: learner.num_cpus, or fewer while a rollout shares the cores
        # (set_compute_threads); 0 leaves torch's default.
        self._full_threads = max(1, int(config.num_cpus)) if config.num_cpus > 0 else 0
        self._wanted_threads = self._full_threads
        self._apply_compute_threads()
        torch.manual_seed(seed)
        self.config = config
        self.seed = seed
        self.temperature = temperature
        self.aggregation: Aggregation = config.aggregation
        self.entropy_coef = config.entropy_coef
        self.max_len = config.max_len or None
        self.logprob_chunk_tokens = config.logprob_chunk_tokens
        self.kl_in: str = config.kl_in
        if self.kl_in not in ("loss", "reward"):
            raise ValueError(f"unknown kl_in {self.kl_in!r}; use loss or reward")
        self.ppo_epochs = int(config.ppo_epochs)
        self.mini_batches = int(config.mini_batches)
        self.tis_cap = float(config.tis_cap)
        if self.ppo_epochs < 1 or self.mini_batches < 1:
            raise ValueError(
                f"ppo_epochs ({self.ppo_epochs}) and mini_batches ({self.mini_batches}) must be "
                "at least 1: each epoch takes at least one optimiser step"
            )
        self.model_path = model_path
        # adapter_dir: where LoRA adapters go for the engines (lora.export = "adapter"), a file
        # system every rollout node can read.
        name = transport_for(transport, config.lora)
        self.sender = make_sender(name, bucket_bytes=bucket_bytes, adapter_dir=adapter_dir)
        self.device = torch.device(
            "cuda" if config.num_gpus > 0 and torch.cuda.is_available() else "cpu"
        )
        # Read the serving dtype before loading: loading in float32 rewrites config.dtype.
        hf_config = AutoConfig.from_pretrained(model_path)
        served = export_dtype or getattr(hf_config, "dtype", None)
        self.export_dtype = to_dtype(served) if served is not None else torch.bfloat16
        self.pad_token_id = getattr(hf_config, "pad_token_id", None) or 0

        # group: this process's place among learner.num_ranks ranks (None: the only one).
        self.ranks = Ranks(group)
        param_dtype, self.autocast_dtype = precision(config)
        self.model = build_policy(model_path, config, param_dtype).to(self.device)
        self.reference = self._build_reference(model_path, param_dtype)
        # A checkpoint's weights go in after the reference took the initial ones and before
        # the policy is sharded, through the same loaders for any number of ranks.
        state = checkpoint.load_weights(Path(resume_from), self.model) if resume_from else None
        # What forward passes run through: the FSDP root around the policy, or the policy.
        self.root = self.ranks.shard(self.model, self.device)
        if config.compile:  # after the reference's copy: a frozen copy stays eager
            compile_layers(self.model)
        self.trainable = [p for p in self.model.parameters() if p.requires_grad]
        self._flop_shape = model_config_shape(self.model)  # (matmul params, layers, width)
        # Each distinct prompt run once where that computes the same logprobs: not under HF's
        # gradient checkpointing (it drops the KV cache the shared forward runs on), not with
        # compiled layers (one graph per layer and pass once they read the cache), not with
        # sliding-window attention (``can_share_prompts``).
        self.share_prompts = (
            config.share_prompts
            and not config.gradient_checkpointing
            and not config.compile
            and can_share_prompts(self.model)
        )
        self.optimizer = torch.optim.AdamW(
            self.trainable,
            lr=config.lr,
            betas=tuple(config.adam_betas),
            eps=config.adam_eps,
            weight_decay=config.weight_decay,
        )
        # The schedule counts optimiser steps (ppo_epochs x mini_batches per train step).
        self.total_optimizer_steps = total_steps * self.ppo_epochs * self.mini_batches
        self.warmup_steps = config.warmup_steps or round(
            config.warmup_ratio * self.total_optimizer_steps
        )
        if config.lr_schedule != "constant" and self.total_optimizer_steps <= self.warmup_steps:
            raise ValueError(
                f"lr_schedule = {config.lr_schedule!r} decays over the run: it needs the run's "
                f"length (run.steps, here {total_steps}) beyond its warmup"
            )
        self.optimizer_steps = 0
        self.kl_control = KlControl(
            config.kl_control,
            config.beta,
            target=config.kl_target,
            horizon=config.kl_horizon,
            beta_final=config.beta_final,
            total_steps=total_steps,
        )
        self._reward_kl: float | None = None  # per-token KL of the batch, kl_in = "reward"
        self._weight_version = 0
        self.step = 0
        if resume_from:
            self._restore(Path(resume_from), state)

    def _build_reference(self, model_path: str, param_dtype: torch.dtype) -> Reference | None:
        """pi_ref from the initial policy (beta > 0). With several ranks a frozen copy is
        loaded afresh and sharded like the policy will be: a deep copy of the policy would be
        whole in every rank."""
        config = self.config
        if config.beta <= 0:
            return None
        frozen = None
        if self.ranks.sharded and config.reference == "frozen_copy" and not config.lora.enabled:
            copy = load_causal_lm(model_path, param_dtype).to(self.device)
            frozen = self.ranks.shard(copy.eval().requires_grad_(False), self.device)
        return Reference(self.model, config.reference, config.lora.enabled, frozen)

    def set_compute_threads(self, threads: int) -> None:
        """Train on ``threads`` torch threads from the next micro-batch on (0: ``num_cpus``).

        For a learner that shares CPU cores with a rollout engine in async mode: the driver
        narrows it while the next batch is being generated and widens it again as soon as that
        batch is in, so neither oversubscribes the cores nor leaves one idle. It is called from
        the actor's ``control`` concurrency group while ``train_step`` runs in the default one,
        so it only records the wish: OpenMP thread counts belong to the calling thread, and the
        training thread applies it between micro-batches.
        """
        self._wanted_threads = int(threads) or self._full_threads

    def _apply_compute_threads(self) -> None:
        wanted = self._wanted_threads
        if wanted and wanted != torch.get_num_threads():
            torch.set_num_threads(wanted)

    @property
    def weight_version(self) -> int:
        """Version of the current policy weights; every ``train_step`` increments it once."""
        return self._weight_version

    @property
    def beta(self) -> float:
        """The KL coefficient of the next train step (``learner.kl_control`` moves it)."""
        return self.kl_control.beta

    @property
    def loss_beta(self) -> float:
        """The KL weight inside the loss: 0 when the KL is charged in the reward instead."""
        return self.beta if self.kl_in == "loss" else 0.0

    def _logprobs(
        self,
        batch: MicroBatch,
        model=None,
        return_entropy: bool = False,
        temperature: float | None = None,
    ):
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
                chunk_tokens=self.logprob_chunk_tokens,
                return_entropy=return_entropy,
                prompts=prompts,
            )

    @torch.no_grad()
    def _per_sample_logprobs(
        self, samples: Sequence[TrainSample], model, temperature: float | None = None
    ) -> list[Tensor]:
        """Logprobs of each sample's completion tokens under ``model``: 1-D CPU tensors (each
        rank computes its share, then every rank has them all)."""
        result: dict[int, Tensor] = {}
        deal = self._deal(samples)
        for indices, weight in zip(deal.micro_batches, deal.weights, strict=True):
            self._apply_compute_threads()
            batch = collate(
                samples,
                indices,
                self.pad_token_id,
                self.device,
                temperature=self.temperature,
                share_prompts=self.share_prompts,
            )
            logprobs = self._logprobs(batch, model, temperature=temperature)
            if weight:
                rows = completion_rows(logprobs, samples, indices)
                result.update(zip(indices, rows, strict=True))
        result = self.ranks.gather(result)
        return [result[i] for i in range(len(samples))]

    def _deal(self, samples: Sequence[TrainSample]) -> Deal:
        """This rank's micro-batches of ``samples`` (``Ranks.plan``)."""
        return self.ranks.plan(samples, self.config.micro_batch_tokens, self.share_prompts)

    def reference_logprobs(self, samples: Sequence[TrainSample]) -> list[Tensor]:
        """Reference-policy logprobs of every completion token (needs beta > 0)."""
        if self.reference is None:
            raise ValueError("no reference policy: it is only built when beta > 0")
        with self.reference.active() as model:
            return self._per_sample_logprobs(samples, model)

    def policy_logprobs(
        self, samples: Sequence[TrainSample], temperature: float | None = None
    ) -> list[Tensor]:
        """Current-policy logprobs of every completion token, without gradient (eval mode), at
        the sampling temperature unless told otherwise."""
        was_training = self.model.training
        self.model.eval()
        try:
            return self._per_sample_logprobs(samples, self.model, temperature)
        finally:
            self.model.train(was_training)

    def sequence_kl(self, samples: Sequence[TrainSample]) -> tuple[float, list[float]]:
        """The current beta and each sample's KL(pi || pi_ref) summed over its completion
        tokens, for ``kl_in = "reward"``.

        The driver subtracts ``beta * kl`` from each reward before normalising advantages
        (``algorithm.advantage.kl_penalised_rewards``); the batch's per-token KL is what an
        adaptive beta steers by after the next train step. Zeros when beta = 0: no reference.
        """
        validate_samples(samples)
        if self.reference is None:
            return self.beta, [0.0] * len(samples)
        policy, ref = self.policy_logprobs(samples), self.reference_logprobs(samples)
        batch = collate(samples, list(range(len(samples))), old_logprobs=policy, ref_logprobs=ref)
        kl = sequence_kl(
            batch.old_logprobs, batch.ref_logprobs, batch.completion_mask, self.config.kl_estimator
        )
        self._reward_kl = kl.sum().item() / max(batch.completion_mask.sum().item(), 1.0)
        return self.beta, kl.tolist()

    def accumulate_gradients(
        self,
        samples: Sequence[TrainSample],
        *,
        old_logprobs: Sequence[Tensor] | None = None,
        ref_logprobs: Sequence[Tensor] | None = None,
        max_len: int | None = None,
    ) -> dict[str, float]:
        """Forward + backward over all micro-batches, leaving the full-batch gradient in ``.grad``.

        ``old_logprobs`` (per sample): pi_old for the ratio and TIS; None means the current
        policy detached (mu = 1). ``ref_logprobs``: computed here when None and the loss has a
        KL term. ``train_step`` is this plus clipping and the optimiser step; it is separate so
        tests can compare gradients for different micro-batch budgets.
        """
        validate_samples(samples)
        if ref_logprobs is None and self.loss_beta > 0:
            ref_logprobs = self.reference_logprobs(samples)
        self.model.train()
        total_tokens = sum(s.num_trained_tokens for s in samples)
        # Dr. GRPO's normaliser must be one constant for the whole batch, not per micro-batch.
        max_len = max_len or self.max_len or max(s.num_trained_tokens for s in samples)
        sums = MicroBatchSums(total_tokens, len(samples))
        deal = self._deal(samples)
        for indices, weight in zip(deal.micro_batches, deal.weights, strict=True):
            self._apply_compute_threads()
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
            logprobs, entropy = self._logprobs(batch, return_entropy=True)  # (B, T) each
            old = batch.old_logprobs if batch.old_logprobs is not None else logprobs.detach()
            loss, metrics = self._loss(
                batch, logprobs, old, entropy, max_len, len(samples), total_tokens
            )
            (loss * weight).backward()  # weight 0: a padding copy, for the ranks' collectives
            if weight:
                sums.add(batch, metrics, old, torch.get_num_threads())
        return sums.metrics(self.ranks, tis=self.tis_cap > 0)

    def _loss(
        self,
        batch: MicroBatch,
        logprobs: Tensor,  # (B, T) with grad
        old: Tensor,  # (B, T) pi_old
        entropy: Tensor,  # (B, T)
        max_len: int,
        num_sequences: int,
        num_tokens: int,
    ) -> tuple[Tensor, dict[str, float]]:
        """``grpo_loss`` with this learner's settings, normalised by the whole step's counts."""
        config = self.config
        sequence = config.ratio_level == "sequence"
        return grpo_loss(
            logprobs,
            old,
            batch.advantages,
            batch.completion_mask,
            batch.ref_logprobs,
            beta=self.loss_beta,
            clip_eps_low=config.seq_clip_eps_low if sequence else config.clip_eps_low,
            clip_eps_high=config.seq_clip_eps_high if sequence else config.clip_eps_high,
            ratio_level=config.ratio_level,
            kl_estimator=self.config.kl_estimator,
            aggregation=self.aggregation,
            entropy=entropy,
            entropy_coef=self.entropy_coef,
            max_len=max_len,
            batch_num_sequences=num_sequences,
            batch_num_tokens=num_tokens,
            sampler_logprobs=batch.sampler_logprobs,
            tis_cap=self.tis_cap,
        )

    @property
    def lr(self) -> float:
        """The learning rate of the next optimiser step (``learner.lr_schedule``)."""
        config = self.config
        return learning_rate(
            self.optimizer_steps,
            config.lr,
            config.lr_schedule,
            self.warmup_steps,
            self.total_optimizer_steps,
            config.min_lr,
        )

    def _optimizer_step(self) -> float:
        self._apply_compute_threads()
        grad_norm = full(clip_grad_norm_(self.trainable, self.config.max_grad_norm))
        lr = self.lr
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.optimizer_steps += 1
        return float(grad_norm)

    def train_step(self, samples: Sequence[TrainSample]) -> dict[str, float]:
        """``ppo_epochs`` x ``mini_batches`` optimiser steps on a scored batch; ``train/*`` metrics.

        ``train/logprob_diff_mean`` is mean |learner - sampler| logprob over completion tokens
        before the update: the off-policy gap between vLLM and this policy (weight staleness
        plus numerics), the gap TIS corrects. Samples with advantage 0 still count in the loss
        normaliser. The weight version advances once per call, however many optimiser steps.
        """
        start = time.perf_counter()
        validate_samples(samples)
        self.optimizer.zero_grad(set_to_none=True)
        beta = self.beta
        if self.ppo_epochs == 1 and self.mini_batches == 1:
            metrics = self.accumulate_gradients(samples)
            metrics["train/grad_norm"] = self._optimizer_step()
        else:
            metrics = self._train_epochs(samples)
        metrics["train/lr"] = self.optimizer.param_groups[0]["lr"]  # the step's last
        metrics["train/model_tflop"] = self.model_flops(samples) / 1e12
        metrics["train/beta"] = beta
        self._weight_version += 1
        self.step += 1
        kl = metrics.get("train/kl", 0.0) if self.kl_in == "loss" else self._reward_kl
        self.kl_control.update(kl or 0.0, len(samples), self.step)
        metrics["train/step_time_s"] = time.perf_counter() - start
        return metrics

    def model_flops(self, samples: Sequence[TrainSample]) -> float:
        """Model FLOPs of one ``train_step`` on ``samples`` (``learner/flops.py``): every epoch's
        forward and backward, pi_old's forward when there are several optimiser steps, and the
        reference's when the loss has a KL term."""
        lengths = spans(samples, self.share_prompts)
        epoch = step_flops(*self._flop_shape, lengths, lora=self.config.lora.enabled)
        several = self.ppo_epochs > 1 or self.mini_batches > 1
        forwards = int(self.loss_beta > 0) + int(several)
        return epoch * self.ppo_epochs + forwards * forward_flops(*self._flop_shape, lengths)

    def _train_epochs(self, samples: Sequence[TrainSample]) -> dict[str, float]:
        """mu epochs of mini-batch steps against pi_old computed once (see ``epochs.py``)."""
        ref = self.reference_logprobs(samples) if self.loss_beta > 0 else None
        old = self.policy_logprobs(samples)
        max_len = self.max_len or max(s.num_trained_tokens for s in samples)
        every, last = MetricMeans(), MetricMeans()
        for epoch in range(self.ppo_epochs):
            seed = f"{self.seed}/{self.step}/{epoch}"
            for part in split_mini_batches(len(samples), self.mini_batches, seed):
                metrics = self.accumulate_gradients(
                    [samples[i] for i in part],
                    old_logprobs=[old[i] for i in part],
                    ref_logprobs=None if ref is None else [ref[i] for i in part],
                    max_len=max_len,
                )
                metrics["train/grad_norm"] = self._optimizer_step()
                every.add(metrics)
                if epoch == self.ppo_epochs - 1:
                    last.add(metrics)
        result = every.means()
        for key in ("ratio_mean", "clip_frac", "loss"):
            result[f"train/{key}_last_epoch"] = last.means()[f"train/{key}"]
        result["train/num_tokens"] = float(sum(s.num_trained_tokens for s in samples))
        result["train/num_samples"] = float(len(samples))
        result["train/optimizer_steps"] = float(every.count)
        return result

    def score(self, samples: Sequence[TrainSample]) -> list[list[float]]:
        """Current policy logprob of every completion token at temperature 1, one list per
        sample: the learner's side of the parity probe (``RolloutWorker.score`` is the engine's),
        on the raw logits as vLLM's prompt logprobs are."""
        validate_samples(samples)
        return [row.tolist() for row in self.policy_logprobs(samples, temperature=1.0)]

    def train_and_export(self, samples: Sequence[TrainSample]) -> tuple[dict, WeightUpdate | None]:
        """``train_step`` then ``export_weights`` in one call, ``time/weight_export_s`` added
        to the metrics. Called with ``num_returns=2``, the driver gets the update's reference
        before the step ends and queues every engine's load on it, so the push starts the
        moment the export is done instead of one driver round trip later."""
        metrics = self.train_step(samples)
        start = time.perf_counter()
        update = self.export_weights()
        metrics["time/weight_export_s"] = time.perf_counter() - start
        if update is not None:
            metrics["weights/update_mib"] = update.num_bytes / (1 << 20)
            metrics["weights/buckets"] = float(update.buckets)
        return metrics, update

    def export_weights(self) -> WeightUpdate | None:
        """The policy for the engines, through the run's weight transport (``self.sender``).
        Every rank gathers the weights (a collective); rank 0 alone sends, the others return
        None."""
        if self.ranks.rank != 0:
            if self.sender.gathers:
                for _ in self.iter_export():  # the same gathers as rank 0's send, kept nowhere
                    pass
            return None
        return self.sender.send(self)

    def export_tensors(self) -> dict[str, Tensor]:
        """The full (LoRA-merged) policy with HF names in the engines' serving dtype."""
        return export_state_dict(self.model, self.export_dtype)

    def export_metadata(self) -> list[tuple[str, torch.dtype, tuple]]:
        """(name, dtype, shape) of every tensor :meth:`iter_export` yields, gathering nothing."""
        return export_metadata(self.model, self.export_dtype)

    def iter_export(self) -> Iterator[tuple[str, Tensor]]:
        """:meth:`export_tensors` one tensor at a time, on the learner's device (every rank
        walks it: a sharded policy's tensors are gathered)."""
        return iter_export(self.model, self.export_dtype, self.device)

    def join_transfer(self, backend: str, address: str, world_size: int) -> None:
        """Enter the ``collective`` transport's group (rank 0 sends; the others gather)."""
        self.sender.join(self, backend, address, world_size, self.ranks.rank)

    def transmit(self) -> float:
        """Broadcast the current weights to the engines (``collective`` transport; every
        rank); the seconds it took."""
        return self.sender.transmit()

    def save_adapter(self, directory: str) -> None:
        """The LoRA adapter alone, in peft's format (``lora.export = "adapter"``)."""
        checkpoint.save_adapter(self.model, directory)

    def save_checkpoint(self, path: str) -> None:
        """HF directory (full model, or the adapter with LoRA) + tokenizer + optimiser + state;
        with several ranks every rank calls it (rank 0 writes the weights, each its optimiser
        shard), on a file system they all reach."""
        state = {
            "weight_version": self._weight_version,
            "step": self.step,
            "optimizer_steps": self.optimizer_steps,
            "beta": self.beta,
            "num_ranks": self.ranks.size,
        }
        tokenizer = load_tokenizer(self.model_path)
        checkpoint.save_training_state(
            Path(path), self.model, self.optimizer, tokenizer, state, self.ranks
        )

    def load_training_state(self, path: str) -> None:
        """Restore weights (full model or LoRA adapter), optimiser, step and weight version.

        Build the learner on the original model path first, so the reference stays the run's
        initial policy (see ``checkpoint.py``). A sharded learner resumes through its
        constructor's ``resume_from`` instead: weights go in before sharding.
        """
        if self.ranks.sharded:
            raise ValueError("a sharded learner resumes through Learner(..., resume_from=path)")
        self._restore(Path(path), checkpoint.load_weights(Path(path), self.model))

    def _restore(self, path: Path, state: dict) -> None:
        """Optimiser state and counters from checkpoint ``path`` (weights already loaded)."""
        checkpoint.load_optimizer(path, self.model, self.optimizer, self.device, self.ranks)
        self._weight_version, self.step = int(state["weight_version"]), int(state["step"])
        # Checkpoints from before the schedules: ppo_epochs x mini_batches per step, fixed beta.
        steps = self.step * self.ppo_epochs * self.mini_batches
        self.optimizer_steps = int(state.get("optimizer_steps", steps))
        for group in self.optimizer.param_groups:  # the config's, not the checkpoint's
            group.update(
                betas=tuple(self.config.adam_betas),
                eps=self.config.adam_eps,
                weight_decay=self.config.weight_decay,
            )
        self.kl_control.beta = float(state.get("beta", self.kl_control.beta))
