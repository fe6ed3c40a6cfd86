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

Options not yet in ``LearnerConfig`` (``kl_in``, ``ppo_epochs``, ``mini_batches``, ``tis_cap``,
``reference``, ``master_dtype``) are read with defaults from ``options.py``.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

from common.config import LearnerConfig
from common.types import TrainSample, WeightUpdate
from common.weight_transport import DEFAULT_BUCKET_BYTES, LORA_ADAPTER, make_sender
from learner import checkpoint
from learner.batching import (
    MicroBatch,
    collate,
    completion_rows,
    pack_micro_batches,
    validate_samples,
)
from learner.epochs import MetricMeans, split_mini_batches
from learner.export import export_state_dict
from learner.grpo import Aggregation, grpo_loss, sequence_kl
from learner.logprobs import completion_logprobs
from learner.policy import autocast, build_policy, load_tokenizer, precision, to_dtype
from learner.reference import Reference

_AVERAGED = ("kl", "clip_frac", "ratio_mean", "entropy", "tis_weight_mean", "tis_clip_frac")


class Learner:
    """Owns the policy and its optimiser; see the module docstring for the step's structure.

    ``export_dtype`` is the dtype the rollout engines serve in (``model.dtype``); by default the
    model config's ``dtype``, else bfloat16.
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
        # Where LoRA adapters are exported for the engines (lora.export = "adapter"): a file
        # system every rollout node can read.
        self.adapter_dir = adapter_dir or tempfile.mkdtemp(prefix="grpo-adapters-")
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
        self.sender = make_sender(transport, bucket_bytes)
        self.device = torch.device(
            "cuda" if config.num_gpus > 0 and torch.cuda.is_available() else "cpu"
        )
        # Read the serving dtype before loading: loading in float32 rewrites config.dtype.
        hf_config = AutoConfig.from_pretrained(model_path)
        served = export_dtype or getattr(hf_config, "dtype", None)
        self.export_dtype = to_dtype(served) if served is not None else torch.bfloat16
        self.pad_token_id = getattr(hf_config, "pad_token_id", None) or 0

        param_dtype, self.autocast_dtype = precision(config)
        self.model = build_policy(model_path, config, param_dtype).to(self.device)
        self.reference: Reference | None = None
        if config.beta > 0:
            mode = config.reference
            self.reference = Reference(self.model, mode, lora=config.lora.enabled)
        self.trainable = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            self.trainable, lr=config.lr, weight_decay=config.weight_decay
        )
        self._weight_version = 0
        self.step = 0

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
    def loss_beta(self) -> float:
        """The KL weight inside the loss: 0 when the KL is charged in the reward instead."""
        return self.config.beta if self.kl_in == "loss" else 0.0

    def _logprobs(
        self,
        batch: MicroBatch,
        model=None,
        return_entropy: bool = False,
        temperature: float | None = None,
    ):
        with autocast(self.device, self.autocast_dtype):
            return completion_logprobs(
                self.model if model is None else model,
                batch.input_ids,
                batch.attention_mask,
                batch.completion_mask,
                self.temperature if temperature is None else temperature,
                chunk_tokens=self.logprob_chunk_tokens,
                return_entropy=return_entropy,
            )

    @torch.no_grad()
    def _per_sample_logprobs(
        self, samples: Sequence[TrainSample], model, temperature: float | None = None
    ) -> list[Tensor]:
        """Logprobs of each sample's completion tokens under ``model``: 1-D CPU tensors."""
        result: list[Tensor] = [torch.empty(0)] * len(samples)
        for indices in pack_micro_batches(samples, self.config.micro_batch_tokens):
            self._apply_compute_threads()
            batch = collate(samples, indices, self.pad_token_id, self.device)
            logprobs = self._logprobs(batch, model, temperature=temperature)
            rows = completion_rows(logprobs, samples, indices)
            for i, row in zip(indices, rows, strict=True):
                result[i] = row
        return result

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

    def sequence_kl(self, samples: Sequence[TrainSample]) -> list[float]:
        """Per-sample KL(pi || pi_ref) summed over completion tokens, for ``kl_in = "reward"``.

        The driver subtracts ``beta * kl`` from each reward before normalising advantages
        (``launch.advantage.kl_penalised_rewards``). Zeros when beta = 0: there is no reference.
        """
        validate_samples(samples)
        if self.reference is None:
            return [0.0] * len(samples)
        policy, ref = self.policy_logprobs(samples), self.reference_logprobs(samples)
        batch = collate(samples, list(range(len(samples))), old_logprobs=policy, ref_logprobs=ref)
        kl = sequence_kl(
            batch.old_logprobs, batch.ref_logprobs, batch.completion_mask, self.config.kl_estimator
        )
        return kl.tolist()

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
        total_tokens = sum(len(s.completion_token_ids) for s in samples)
        # Dr. GRPO's normaliser must be one constant for the whole batch, not per micro-batch.
        max_len = max_len or self.max_len or max(len(s.completion_token_ids) for s in samples)
        sums: dict[str, float] = dict.fromkeys(("loss", *_AVERAGED), 0.0)
        abs_diff = 0.0
        threads: list[int] = []
        for indices in pack_micro_batches(samples, self.config.micro_batch_tokens):
            self._apply_compute_threads()
            threads.append(torch.get_num_threads())
            batch = collate(
                samples,
                indices,
                self.pad_token_id,
                self.device,
                old_logprobs=old_logprobs,
                ref_logprobs=ref_logprobs,
            )
            logprobs, entropy = self._logprobs(batch, return_entropy=True)  # (B, T) each
            old = batch.old_logprobs if batch.old_logprobs is not None else logprobs.detach()
            loss, metrics = self._loss(
                batch, logprobs, old, entropy, max_len, len(samples), total_tokens
            )
            loss.backward()
            share = batch.num_completion_tokens / total_tokens
            sums["loss"] += metrics["loss"]  # already normalised by the whole batch
            for key in _AVERAGED:
                sums[key] += metrics.get(key, 0.0) * share
            diff = (old - batch.sampler_logprobs).abs() * batch.completion_mask
            abs_diff += diff.sum().item()
        if self.tis_cap <= 0:
            del sums["tis_weight_mean"], sums["tis_clip_frac"]
        return {
            **{f"train/{k}": v for k, v in sums.items()},
            "train/logprob_diff_mean": abs_diff / total_tokens,
            "train/num_tokens": float(total_tokens),
            "train/num_samples": float(len(samples)),
            "train/compute_threads_mean": sum(threads) / len(threads),
        }

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
        return grpo_loss(
            logprobs,
            old,
            batch.advantages,
            batch.completion_mask,
            batch.ref_logprobs,
            beta=self.loss_beta,
            clip_eps_low=self.config.clip_eps_low,
            clip_eps_high=self.config.clip_eps_high,
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

    def _optimizer_step(self) -> float:
        self._apply_compute_threads()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.trainable, self.config.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
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
        if self.ppo_epochs == 1 and self.mini_batches == 1:
            metrics = self.accumulate_gradients(samples)
            metrics["train/grad_norm"] = self._optimizer_step()
        else:
            metrics = self._train_epochs(samples)
        self._weight_version += 1
        self.step += 1
        metrics["train/step_time_s"] = time.perf_counter() - start
        return metrics

    def _train_epochs(self, samples: Sequence[TrainSample]) -> dict[str, float]:
        """mu epochs of mini-batch steps against pi_old computed once (see ``epochs.py``)."""
        ref = self.reference_logprobs(samples) if self.loss_beta > 0 else None
        old = self.policy_logprobs(samples)
        max_len = self.max_len or max(len(s.completion_token_ids) for s in samples)
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
        result["train/num_tokens"] = float(sum(len(s.completion_token_ids) for s in samples))
        result["train/num_samples"] = float(len(samples))
        result["train/optimizer_steps"] = float(every.count)
        return result

    def score(self, samples: Sequence[TrainSample]) -> list[list[float]]:
        """Current policy logprob of every completion token at temperature 1, one list per
        sample: the learner's side of the parity probe (``RolloutWorker.score`` is the engine's),
        on the raw logits as vLLM's prompt logprobs are."""
        validate_samples(samples)
        return [row.tolist() for row in self.policy_logprobs(samples, temperature=1.0)]

    def train_and_export(self, samples: Sequence[TrainSample]) -> tuple[dict, WeightUpdate]:
        """``train_step`` then ``export_weights`` in one call, ``time/weight_export_s`` added
        to the metrics. Called with ``num_returns=2``, the driver gets the update's reference
        before the step ends and queues every engine's load on it, so the push starts the
        moment the export is done instead of one driver round trip later."""
        metrics = self.train_step(samples)
        start = time.perf_counter()
        update = self.export_weights()
        metrics["time/weight_export_s"] = time.perf_counter() - start
        metrics["weights/update_mib"] = update.num_bytes / (1 << 20)
        if isinstance(update.payload, list):
            metrics["weights/buckets"] = float(len(update.payload))
        return metrics, update

    def export_weights(self) -> WeightUpdate:
        """The policy for the engines: the LoRA adapter alone (``lora.export = "adapter"``), or
        the full (LoRA-merged) HF-named weights in their serving dtype via the transport."""
        if self.config.lora.enabled and self.config.lora.export == "adapter":
            path = self.export_adapter(self.adapter_dir)
            checkpoint.prune_adapters(self.adapter_dir, keep=2)
            size = sum(f.stat().st_size for f in Path(path).iterdir())
            return WeightUpdate(self._weight_version, LORA_ADAPTER, path, num_bytes=size)
        tensors = export_state_dict(self.model, self.export_dtype)
        return self.sender.send(tensors, self._weight_version)

    def export_adapter(self, path_dir: str) -> str:
        """Save the LoRA adapter under ``path_dir/v{weight_version:06d}``; return that path.

        For ``lora.export = "adapter"``: the rollout engines load it as a vLLM LoRA adapter
        (one adapter id per weight version) instead of receiving merged full weights.
        """
        return checkpoint.export_adapter(self.model, path_dir, self._weight_version)

    @torch.no_grad()
    def perturb_weights_(self, scale: float, seed: int) -> None:
        """Add N(0, scale^2) noise to every trainable parameter (tests of the weight push).

        The weights change, so the version is incremented like after a train step.
        """
        generator = torch.Generator().manual_seed(seed)
        for param in self.trainable:
            noise = torch.randn(param.shape, generator=generator, dtype=torch.float32)
            param.add_(noise.to(device=param.device, dtype=param.dtype) * scale)
        self._weight_version += 1

    def save_checkpoint(self, path: str) -> None:
        """HF directory (full model, or the adapter with LoRA) + tokenizer + optimiser + state."""
        state = {"weight_version": self._weight_version, "step": self.step}
        tokenizer = load_tokenizer(self.model_path)
        checkpoint.save_training_state(Path(path), self.model, self.optimizer, tokenizer, state)

    def load_training_state(self, path: str) -> None:
        """Restore weights (full model or LoRA adapter), optimiser, step and weight version.

        Build the learner on the original model path first, so the reference stays the run's
        initial policy (see ``checkpoint.py``).
        """
        state = checkpoint.load_training_state(Path(path), self.model, self.optimizer, self.device)
        self._weight_version, self.step = int(state["weight_version"]), int(state["step"])
