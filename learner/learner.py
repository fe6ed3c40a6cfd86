"""The learner actor's face: construction and the calls the driver and the weight transport make.

A plain class so unit tests can build it without Ray (the launcher makes it an actor); everything
that crosses its boundary is plain data. The train step itself is :class:`~learner.step.Trainer`'s;
the learner adds what the run around it needs: beta's controller, the weight version, FLOPs and
utilisation, the parity probe's scores, checkpoints and compute threads. It is the
:class:`~common.transport.WeightSource` of the run's weight transport (``export.py``).
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch
from torch import Tensor

from algorithm.kl_control import KlControl
from algorithm.loss import sequence_kl
from common.config import LearnerConfig, LossConfig
from common.memory.arithmetic import GIB, ModelShape
from common.memory.fit import MicroBatchFit, fit_card, learner_step_peak
from common.model_files import ModelFiles, local_path
from common.transport import DEFAULT_BUCKET_BYTES, transport_for
from common.types import ProcessGroupSpec, TrainSample, WeightUpdate
from learner import checkpoint
from learner.batching import collate, validate_samples
from learner.card import card_memory_gib
from learner.export import export_metadata, export_state_dict, iter_export
from learner.flops import forward_flops, mfu_peak_flops, model_config_shape, spans, step_flops
from learner.logprobs import can_share_prompts
from learner.offload import OptimizerOffload, release_cached
from learner.policy import (
    DTYPES,
    base_model_of,
    build_policy,
    checkpoint_layers,
    compile_layers,
    load_causal_lm,
    load_tokenizer,
    precision,
    serving_dtype_and_pad,
)
from learner.reference import Reference, frozen_copy
from learner.senders import make_sender
from learner.sharding import Ranks
from learner.step import Trainer
from learner.threads import ComputeThreads

logger = logging.getLogger(__name__)


class Learner:
    """Owns the policy, its train step and its exports.

    ``export_dtype``: what the rollout engines serve in (``model.dtype``; by default the model
    config's). ``total_steps``: the run's length in train steps, the horizon of a decaying
    learning rate and of a linear beta schedule. ``group``: this process's place among
    ``learner.num_ranks`` ranks (None: the only one). ``adapter_dir``: where LoRA adapters go
    for the engines, a file system every rollout node can read.
    """

    def __init__(
        self,
        model_path: str | ModelFiles,
        config: LearnerConfig,
        temperature: float = 1.0,
        seed: int = 0,
        transport: str = "cpu_safetensors",
        *,
        loss: LossConfig | None = None,
        export_dtype: str | None = None,
        adapter_dir: str | None = None,
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
        total_steps: int = 0,
        group: ProcessGroupSpec | None = None,
        resume_from: str | ModelFiles | None = None,
        card_reserve_gib: float = 0.0,
    ) -> None:
        self.threads = ComputeThreads(config.num_cpus)
        self.threads.apply()
        torch.manual_seed(seed)
        self.config, self.model_path = config, local_path(model_path)  # fetched if not here
        self.loss = loss or LossConfig()
        resume_from = resume_from and local_path(resume_from)
        self.card_reserve_gib = card_reserve_gib  # a sleeping engine's: not the step's to fit
        name = transport_for(transport, config.lora)
        self.sender = make_sender(name, bucket_bytes=bucket_bytes, adapter_dir=adapter_dir)
        self.device = torch.device(
            "cuda" if config.num_gpus > 0 and torch.cuda.is_available() else "cpu"
        )
        self.export_dtype, pad_token_id = serving_dtype_and_pad(self.model_path, export_dtype)
        host_state = config.offload_optimizer == "step"  # FSDP2's CPU offload (sharding.py)
        self.ranks = Ranks(group, host_state=host_state, device_type=self.device.type)
        state = self._build_models(self.model_path, config, resume_from)
        self.trainer = Trainer(
            self.model,
            config,
            loss=self.loss,
            root=self.root,
            reference=self.reference,
            ranks=self.ranks,
            device=self.device,
            autocast_dtype=self.autocast_dtype,
            threads=self.threads,
            share_prompts=self.share_prompts,
            temperature=temperature,
            pad_token_id=pad_token_id,
            seed=seed,
            total_steps=total_steps,
            micro_batch_tokens=self.fit.tokens,
            fused_head=self.compiled,
        )
        self.optimizer, self.trainable = self.trainer.optimizer, self.trainer.trainable
        self.offloader = OptimizerOffload(self.optimizer)
        self.kl_control = KlControl.of(self.loss, total_steps)
        self._peak_flops: float | None = None
        self._reward_kl: float | None = None  # per-token KL of the batch, kl_in = "reward"
        self._weight_version, self.step = 0, 0
        if resume_from:
            self._restore(Path(resume_from), state)

    def _build_models(
        self, model_path: str, config: LearnerConfig, resume_from: str | None
    ) -> dict | None:
        """The policy, its reference and what forward passes run through (``root``); returns
        the learner state of the checkpoint resumed from, if any."""
        param_dtype, self.autocast_dtype = precision(config)
        policy = build_policy(model_path, config, param_dtype, self.device.type)
        # state on the host: FSDP2 moves each unit's shards there as it wraps it
        self.model = policy if self.ranks.host_state else policy.to(self.device)
        self.reference = self._build_reference(model_path)
        # A checkpoint's weights go in after the reference took the initial ones and before
        # the policy is sharded, through the same loaders for any number of ranks.
        state = checkpoint.load_weights(Path(resume_from), self.model) if resume_from else None
        # Checkpointed layers before sharding and compiling: both wrap around what this sets
        # (policy.checkpoint_layers); after the reference, which runs without autograd.
        self.fit = self._fit_memory()
        checkpoint_layers(self.model, self.fit.checkpointed)
        self.root = self.ranks.shard(self.model, self.device)  # the FSDP root, or the policy
        self.compiled = config.compile_on(self.device.type)
        if self.compiled:  # the policy's layers, and a frozen reference's (it runs every step)
            compile_layers(self.model)
            if self.reference is not None and self.reference.frozen is not None:
                compile_layers(self.reference.frozen)
        self._flop_shape = model_config_shape(self.model)  # (matmul params, layers, width)
        # Not with a checkpointed layer: its recompute would fill the shared forward's KV cache
        # a second time.
        self.share_prompts = (
            config.share_prompts_on(self.device.type)
            and not self.fit.checkpointed
            and can_share_prompts(self.model)
        )
        return state

    def _fit_memory(self) -> MicroBatchFit:
        """The decoder layers to checkpoint and the micro-batch token budget, fitted to
        ``learner.memory_gib`` or the CUDA card by ``common/memory/fit.py``'s arithmetic on this
        model's shape; logged once."""
        config, card = self.config, card_memory_gib(self.device)
        fixed = MicroBatchFit(0, config.micro_batch_tokens)
        if config.gradient_checkpointing is False and not config.memory_gib and not card:
            return fixed
        try:
            shape = ModelShape.from_config(base_model_of(self.model).config.to_dict())
        except ValueError as exc:
            if config.gradient_checkpointing is not False or config.memory_gib:
                raise
            # only the card's ceiling asked for the count: run as configured, as on CPU
            logger.warning("%s: micro-batches of micro_batch_tokens, not fitted to the card", exc)
            return fixed
        # weights.transport = "ipc": every rank keeps a whole serving-dtype copy for its engine
        copy = shape.parameters * self.export_dtype.itemsize if self.sender.every_rank_sends else 0
        terms = {
            "device": self.device.type,
            "export_copy": copy,
            "with_reference": self.reference is not None,
        }
        fit = fit_card(shape, config, card, self.card_reserve_gib, **terms)
        peak = learner_step_peak(shape, config, fit.tokens, checkpointed=fit.checkpointed, **terms)
        logger.info(
            "learner.gradient_checkpointing %s, memory_gib %g%s: %d of %d decoder layers "
            "checkpointed, micro-batches of %d tokens (a step's peak %.1f GiB by "
            "common/memory/arithmetic.py's arithmetic)",
            config.gradient_checkpointing,
            config.memory_gib,
            f" (the card: {card:.1f} GiB)" if card and not config.memory_gib else "",
            fit.checkpointed,
            shape.layers,
            fit.tokens,
            peak / GIB,
        )
        return fit

    def _build_reference(self, model_path: str) -> Reference | None:
        """pi_ref from the initial policy (beta > 0), its weights in ``learner.reference_dtype``.
        With several ranks a frozen copy is loaded afresh and sharded like the policy will be:
        a deep copy of the policy would be whole in every rank."""
        config = self.config
        if self.loss.beta <= 0:
            return None
        dtype = DTYPES[config.reference_dtype_on(self.device.type)]
        frozen = None
        if config.reference == "frozen_copy" and not config.lora.enabled:
            if self.ranks.sharded:  # its shards stay on the device, whatever the policy's do
                copy = load_causal_lm(model_path, dtype).to(self.device)
                frozen = self.ranks.shard(copy.eval().requires_grad_(False), self.device, False)
            elif self.ranks.host_state:  # the policy waits on the host; the copy runs here
                frozen = frozen_copy(self.model, dtype).to(self.device)
        return Reference(self.model, config.reference, config.lora.enabled, frozen, dtype)

    def set_compute_threads(self, threads: int) -> None:
        """Train on ``threads`` torch threads from the next micro-batch on (0: ``num_cpus``);
        see ``threads.py``."""
        self.threads.request(threads)

    def offload_optimizer(self) -> float:
        """Move the optimiser state to host memory until :meth:`reload_optimizer`, so a
        colocated engine has its device memory while it generates; the seconds it took."""
        return self.offloader.offload()["seconds"]

    def reload_optimizer(self) -> float:
        """The optimiser state back on the learner's device before a step; the seconds."""
        return self.offloader.reload()["seconds"]

    def release_memory(self) -> float:
        """After a step under ``rollout.colocate``: the blocks torch's caching allocator kept
        from the step's activations back to the driver, for the engine waking on the card; the
        seconds."""
        start = time.perf_counter()
        release_cached({self.device})
        return time.perf_counter() - start

    @property
    def peak_flops(self) -> float:
        """train/mfu's denominator: the device's matmul FLOP/s per rank x the ranks, measured
        on first read (just before the first step). Not at construction: a colocated engine
        starting on the same device would share its compute and the peak would read low."""
        if self._peak_flops is None:
            self._peak_flops = mfu_peak_flops(self.config, self.device) * self.ranks.size
        return self._peak_flops

    @property
    def weight_version(self) -> int:
        """Version of the current policy weights; every ``train_step`` increments it once."""
        return self._weight_version

    @property
    def beta(self) -> float:
        """The KL coefficient of the next train step (``algorithm.loss.kl_control`` moves it)."""
        return self.kl_control.beta

    @property
    def loss_beta(self) -> float:
        """The KL weight inside the loss: 0 when the KL is charged in the reward instead."""
        return self.kl_control.loss_beta

    def reference_logprobs(self, samples: Sequence[TrainSample]) -> list[Tensor]:
        """Reference-policy logprobs of every completion token (needs beta > 0)."""
        return self.trainer.reference_logprobs(samples)

    def policy_logprobs(
        self, samples: Sequence[TrainSample], temperature: float | None = None
    ) -> list[Tensor]:
        """Current-policy logprobs of every completion token, without gradient (eval mode), at
        the sampling temperature unless told otherwise."""
        return self.trainer.policy_logprobs(samples, temperature)

    def sequence_kl(self, samples: Sequence[TrainSample]) -> tuple[float, list[float]]:
        """The current beta and each sample's KL(pi || pi_ref) summed over its completion
        tokens, for ``kl_in = "reward"``; the batch's per-token KL is what an adaptive beta
        steers by after the next train step. Zeros when beta = 0: no reference."""
        validate_samples(samples)
        if self.reference is None:
            return self.beta, [0.0] * len(samples)
        policy, ref = self.policy_logprobs(samples), self.reference_logprobs(samples)
        batch = collate(samples, list(range(len(samples))), old_logprobs=policy, ref_logprobs=ref)
        kl = sequence_kl(
            batch.old_logprobs, batch.ref_logprobs, batch.completion_mask, self.loss.kl_estimator
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

        ``old_logprobs`` (per sample): pi_old; None means the current policy detached (mu = 1).
        ``ref_logprobs``: computed here when None and the loss has a KL term. Separate from
        ``train_step`` so tests can compare gradients for different micro-batch budgets.
        """
        return self.trainer.accumulate_gradients(
            samples,
            self.loss_beta,
            old_logprobs=old_logprobs,
            ref_logprobs=ref_logprobs,
            max_len=max_len,
        )

    def train_step(self, samples: Sequence[TrainSample]) -> dict[str, float]:
        """``ppo_epochs`` x ``mini_batches`` optimiser steps on a scored batch; ``train/*`` metrics.
        The weight version advances once per call, however many optimiser steps."""
        peak = self.peak_flops  # before the clock starts: the first call measures it
        start = time.perf_counter()
        validate_samples(samples)
        beta = self.beta
        metrics = self.trainer.train(samples, self.loss_beta, self.step)
        metrics["train/model_tflop"] = self.model_flops(samples) / 1e12
        metrics["train/beta"] = beta
        self._weight_version += 1
        self.step += 1
        kl = self.kl_control.steering_kl(metrics.get("train/kl", 0.0), self._reward_kl)
        self.kl_control.update(kl, len(samples), self.step)
        metrics["train/step_time_s"] = time.perf_counter() - start
        metrics["train/checkpointed_layers"] = float(self.fit.checkpointed)
        metrics["train/micro_batch_tokens"] = float(self.fit.tokens)
        if peak > 0:
            needed = self.model_flops(samples, share_prompts=True)
            metrics["train/mfu"] = needed / metrics["train/step_time_s"] / peak
        return metrics

    def model_flops(
        self, samples: Sequence[TrainSample], share_prompts: bool | None = None
    ) -> float:
        """Model FLOPs of one ``train_step`` on ``samples`` (``flops.py``): every epoch's
        forward and backward, pi_old's forward with several optimiser steps, the reference's
        with a KL term. ``share_prompts``: count each distinct prompt once (True: ``train/mfu``'s)
        or every row's (False); by default as this learner runs them."""
        shared = self.share_prompts if share_prompts is None else share_prompts
        lengths = spans(samples, shared)
        epoch = step_flops(*self._flop_shape, lengths, lora=self.config.lora.enabled)
        forward = forward_flops(*self._flop_shape, lengths)
        several = self.trainer.steps_per_train_step > 1
        forwards = int(self.loss_beta > 0) + int(several)
        return epoch * self.config.ppo_epochs + forwards * forward

    def score(self, samples: Sequence[TrainSample]) -> list[list[float]]:
        """Current policy logprob of every completion token at temperature 1 (raw logits, as
        vLLM's prompt logprobs), one list per sample: the learner's side of the parity probe."""
        validate_samples(samples)
        return [row.tolist() for row in self.policy_logprobs(samples, temperature=1.0)]

    def train_and_export(self, samples: Sequence[TrainSample]) -> tuple[dict, WeightUpdate | None]:
        """``train_step`` then ``export_weights`` in one call, with the export's metrics. Called
        with ``num_returns=2``, the driver queues every engine's load on the update's reference
        before the step ends, saving a driver round trip."""
        cuda = self.device.type == "cuda"
        if cuda:  # the step and the export's gathered copy: what learner.memory_gib is for
            torch.cuda.reset_peak_memory_stats(self.device)
        metrics = self.train_step(samples)
        start = time.perf_counter()
        update = self.export_weights()
        metrics["time/weight_export_s"] = time.perf_counter() - start
        if cuda:
            metrics["train/peak_memory_gib"] = torch.cuda.max_memory_allocated(self.device) / GIB
        if update is not None:
            metrics["weights/update_mib"] = update.num_bytes / (1 << 20)
            metrics["weights/buckets"] = float(update.buckets)
        return metrics, update

    def export_weights(self) -> WeightUpdate | None:
        """The policy for the engines, through the run's weight transport. Every rank gathers
        the weights (a collective); rank 0 alone sends (with ``ipc`` every rank sends, and rank
        0's update carries them all), the others return None."""
        if self.ranks.rank != 0:
            if self.sender.every_rank_sends:
                self.sender.send(self)
            elif self.sender.gathers:
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

    def save_checkpoint(self, path: str) -> dict:
        """HF directory (full model, or the adapter with LoRA) + tokenizer + optimiser + state
        (``checkpoint.py``); with several ranks every rank calls it. Returns what it wrote on
        this host and where, for a driver on another host to fetch."""
        state = {
            "weight_version": self._weight_version,
            "step": self.step,
            "optimizer_steps": self.trainer.optimizer_steps,
            "beta": self.beta,
            "num_ranks": self.ranks.size,
        }
        tokenizer = load_tokenizer(self.model_path)
        checkpoint.save_training_state(
            Path(path), self.model, self.optimizer, tokenizer, state, self.ranks
        )
        return checkpoint.written(Path(path))

    def discard(self, path: str) -> None:
        """Delete this host's copy of checkpoint ``path``: the driver fetched it to its own."""
        shutil.rmtree(path, ignore_errors=True)

    def load_training_state(self, path: str) -> None:
        """Restore weights, optimiser, step and weight version (see ``checkpoint.py``). A
        sharded learner resumes through ``resume_from`` instead: weights go in before sharding.
        """
        if self.ranks.wrapped:  # FSDP2 units take the weights before they wrap them
            raise ValueError("an FSDP2 learner resumes through Learner(..., resume_from=path)")
        self._restore(Path(path), checkpoint.load_weights(Path(path), self.model))

    def _restore(self, path: Path, state: dict) -> None:
        """Optimiser state and counters from checkpoint ``path`` (weights already loaded)."""
        self.offloader.reload()  # loading puts the state on the device: nothing stays away
        self.trainer.restore(path, state)
        self._weight_version, self.step = int(state["weight_version"]), int(state["step"])
        self.kl_control.beta = float(state["beta"])
