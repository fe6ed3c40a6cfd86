"""The learner: policy, optional reference, GRPO loss and optimiser, one step per batch.

A plain class so unit tests can build it without Ray; the launcher makes it an actor with
``ray.remote(num_cpus=..., num_gpus=...)(Learner)``. Everything that crosses its boundary is
plain data (``TrainSample`` in, metric dicts and ``WeightUpdate`` out).

One ``train_step`` = one optimiser step over the whole batch (GRPO with mu = 1): the batch is
split into micro-batches by a padded-token budget, each micro-batch's loss is normalised by the
*whole* batch's counts so the accumulated gradient is the full-batch gradient, then the gradient
is clipped and AdamW steps. Reference model: with LoRA it is the base model with the adapter
switched off (no second copy in memory); for full fine-tuning a frozen copy, built only when
beta > 0.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

from common.config import LearnerConfig
from common.types import TrainSample, WeightUpdate
from common.weight_transport import make_sender
from learner.batching import MicroBatch, collate, pack_micro_batches, validate_samples
from learner.export import export_state_dict
from learner.grpo import Aggregation, grpo_loss
from learner.logprobs import completion_logprobs

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class Learner:
    """Owns the policy and its optimiser; see the module docstring for the step's structure.

    ``export_dtype`` is the dtype
    the rollout engines serve in (``model.dtype``); by default the model config's ``dtype``,
    else bfloat16.
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
    ) -> None:
        from transformers import AutoConfig, AutoModelForCausalLM

        if config.num_cpus > 0:
            torch.set_num_threads(max(1, int(config.num_cpus)))
        torch.manual_seed(seed)
        self.config = config
        self.temperature = temperature
        self.aggregation: Aggregation = config.aggregation
        self.entropy_coef = config.entropy_coef
        self.max_len = config.max_len or None
        self.logprob_chunk_tokens = config.logprob_chunk_tokens
        self.model_path = model_path
        self.sender = make_sender(transport)
        self.device = torch.device(
            "cuda" if config.num_gpus > 0 and torch.cuda.is_available() else "cpu"
        )
        # Read the serving dtype before loading: loading in float32 rewrites config.dtype.
        hf_config = AutoConfig.from_pretrained(model_path)
        served = export_dtype or getattr(hf_config, "dtype", None)
        self.export_dtype = _to_dtype(served) if served is not None else torch.bfloat16
        self.pad_token_id = getattr(hf_config, "pad_token_id", None) or 0

        model = AutoModelForCausalLM.from_pretrained(model_path, dtype=_DTYPES[config.dtype])
        model.config.use_cache = False
        if config.gradient_checkpointing:
            # Non-reentrant checkpointing lets gradients reach LoRA weights even though the
            # (frozen) embedding output does not require grad.
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
        self.ref_model = None
        if config.lora.enabled:
            model = _wrap_lora(model, config)
        elif config.beta > 0:
            self.ref_model = copy.deepcopy(model).to(self.device).eval().requires_grad_(False)
        self.model = model.to(self.device)
        self.trainable = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            self.trainable, lr=config.lr, weight_decay=config.weight_decay
        )
        self._weight_version = 0
        self.step = 0

    @property
    def weight_version(self) -> int:
        """Version of the current policy weights; every change to them increments it."""
        return self._weight_version

    def _logprobs(self, batch: MicroBatch, return_entropy: bool = False):
        return completion_logprobs(
            self.model,
            batch.input_ids,
            batch.attention_mask,
            batch.completion_mask,
            self.temperature,
            chunk_tokens=self.logprob_chunk_tokens,
            return_entropy=return_entropy,
        )

    @torch.no_grad()
    def _ref_logprobs(self, batch: MicroBatch) -> Tensor | None:
        if self.config.beta <= 0:
            return None
        if self.config.lora.enabled:
            with self.model.disable_adapter():
                return self._logprobs(batch)
        assert self.ref_model is not None
        return completion_logprobs(
            self.ref_model,
            batch.input_ids,
            batch.attention_mask,
            batch.completion_mask,
            self.temperature,
            chunk_tokens=self.logprob_chunk_tokens,
        )

    def accumulate_gradients(self, samples: Sequence[TrainSample]) -> dict[str, float]:
        """Forward + backward over all micro-batches, leaving the full-batch gradient in ``.grad``.

        ``train_step`` is this plus clipping and the optimiser step; it is separate so tests can
        compare gradients for different micro-batch budgets.
        """
        validate_samples(samples)
        self.model.train()
        total_tokens = sum(len(s.completion_token_ids) for s in samples)
        # Dr. GRPO's normaliser must be one constant for the whole batch, not per micro-batch.
        max_len = self.max_len or max(len(s.completion_token_ids) for s in samples)
        sums = {"loss": 0.0, "kl": 0.0, "clip_frac": 0.0, "ratio_mean": 0.0, "entropy": 0.0}
        abs_diff = 0.0
        for indices in pack_micro_batches(samples, self.config.micro_batch_tokens):
            batch = collate(samples, indices, self.pad_token_id, self.device)
            ref_logprobs = self._ref_logprobs(batch)
            logprobs, entropy = self._logprobs(batch, return_entropy=True)  # (B, T) each
            # mu = 1: the batch was sampled by (a version of) this policy and is used for one
            # step, so pi_old is the current policy before the update, i.e. these logprobs
            # detached. That avoids a second forward pass and makes the ratio exactly 1.
            old_logprobs = logprobs.detach()
            loss, metrics = grpo_loss(
                logprobs,
                old_logprobs,
                batch.advantages,
                batch.completion_mask,
                ref_logprobs,
                beta=self.config.beta,
                clip_eps_low=self.config.clip_eps_low,
                clip_eps_high=self.config.clip_eps_high,
                kl_estimator=self.config.kl_estimator,
                aggregation=self.aggregation,
                entropy=entropy,
                entropy_coef=self.entropy_coef,
                max_len=max_len,
                batch_num_sequences=len(samples),
                batch_num_tokens=total_tokens,
            )
            loss.backward()
            share = batch.num_completion_tokens / total_tokens
            sums["loss"] += metrics["loss"]  # already normalised by the whole batch
            for key in ("kl", "clip_frac", "ratio_mean", "entropy"):
                sums[key] += metrics[key] * share
            diff = (old_logprobs - batch.sampler_logprobs).abs() * batch.completion_mask
            abs_diff += diff.sum().item()
        return {
            **{f"train/{k}": v for k, v in sums.items()},
            "train/logprob_diff_mean": abs_diff / total_tokens,
            "train/num_tokens": float(total_tokens),
            "train/num_samples": float(len(samples)),
        }

    def train_step(self, samples: Sequence[TrainSample]) -> dict[str, float]:
        """One GRPO optimiser step on a scored batch; returns ``train/*`` metrics.

        ``train/logprob_diff_mean`` is mean |learner - sampler| logprob over completion tokens
        before the update: the off-policy gap between vLLM and this policy (weight staleness
        plus numerics). Samples with advantage 0 still count in the loss normaliser.
        """
        start = time.perf_counter()
        self.optimizer.zero_grad(set_to_none=True)
        metrics = self.accumulate_gradients(samples)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.trainable, self.config.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self._weight_version += 1
        self.step += 1
        metrics["train/grad_norm"] = float(grad_norm)
        metrics["train/step_time_s"] = time.perf_counter() - start
        return metrics

    @torch.no_grad()
    def compute_logprobs(self, samples: Sequence[TrainSample]) -> list[list[float]]:
        """Current policy logprob of every completion token, one list per sample."""
        validate_samples(samples)
        self.model.eval()
        result: list[list[float]] = [[] for _ in samples]
        for indices in pack_micro_batches(samples, self.config.micro_batch_tokens):
            batch = collate(samples, indices, self.pad_token_id, self.device)
            logprobs = self._logprobs(batch).float().cpu()  # (B, T)
            for row, i in enumerate(indices):
                start = len(samples[i].prompt_token_ids)
                end = start + len(samples[i].completion_token_ids)
                result[i] = logprobs[row, start:end].tolist()
        return result

    def export_weights(self) -> WeightUpdate:
        """Send the full (LoRA-merged) HF-named policy in its serving dtype via the transport."""
        tensors = export_state_dict(self.model, self.export_dtype)
        return self.sender.send(tensors, self._weight_version)

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
        out = Path(path)
        out.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(out)
        tokenizer = _load_tokenizer(self.model_path)
        if tokenizer is not None:
            tokenizer.save_pretrained(out)
        torch.save(self.optimizer.state_dict(), out / "optimizer.pt")
        state = {"weight_version": self._weight_version, "step": self.step}
        (out / "learner_state.json").write_text(json.dumps(state, indent=2) + "\n")

    def load_training_state(self, path: str) -> None:
        """Restore optimiser state, step and weight version written by ``save_checkpoint``.

        The weights themselves come from building the learner on the checkpoint directory (full
        fine-tuning); LoRA resumption would need the adapter loaded, which is not supported yet.
        """
        out = Path(path)
        self.optimizer.load_state_dict(torch.load(out / "optimizer.pt", map_location=self.device))
        state = json.loads((out / "learner_state.json").read_text())
        self._weight_version, self.step = int(state["weight_version"]), int(state["step"])


def _to_dtype(value: object) -> torch.dtype:
    if isinstance(value, torch.dtype):
        return value
    name = str(value).removeprefix("torch.")
    if name not in _DTYPES:
        raise ValueError(
            f"model config dtype {value!r} is not one vLLM serves here: {list(_DTYPES)}"
        )
    return _DTYPES[name]


def _wrap_lora(model, config: LearnerConfig):
    from peft import LoraConfig as PeftLoraConfig
    from peft import get_peft_model

    lora = config.lora
    peft_config = PeftLoraConfig(
        r=lora.rank,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=list(lora.target_modules),
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, peft_config)


def _load_tokenizer(model_path: str):
    """The tokenizer saved beside the model, if any: checkpoints should be servable as-is."""
    root = Path(model_path)
    if not any((root / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json")):
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_path)
