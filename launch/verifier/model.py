"""The verifier of ``launch.verifier.train``: a two-label sequence classifier on the base model,
its tokenizer (cut and padded on the left, as the ``scorer`` reward term reads it) and its
training loop.

Kept apart from the command so that ``python -m launch.verifier.train --help`` and its argument
errors answer without importing torch and transformers.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer


def class_weights(positive: Sequence[bool]) -> list[float]:
    """Per example: n / (2 n_class), so both classes weigh half of the total (1 when only one
    class is present)."""
    n, n_pos = len(positive), sum(positive)
    if n_pos in (0, n):
        return [1.0] * n
    return [n / (2 * n_pos) if p else n / (2 * (n - n_pos)) for p in positive]


class Verifier:
    """The classifier, its tokenizer and its training loop."""

    def __init__(self, model_path: str, max_length: int, lora_rank: int = 0, seed: int = 0):
        torch.manual_seed(seed)
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.tokenizer.truncation_side = "left"  # as the scorer: the end must survive
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.max_length = max_length
        model = AutoModelForSequenceClassification.from_pretrained(
            model_path, num_labels=2, dtype=torch.float32
        )
        model.config.pad_token_id = self.tokenizer.pad_token_id
        if lora_rank:
            from peft import LoraConfig, TaskType, get_peft_model  # lazy: only with --lora-rank

            lora = LoraConfig(
                task_type=TaskType.SEQ_CLS,
                r=lora_rank,
                lora_alpha=2 * lora_rank,
                target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
            )
            model = get_peft_model(model, lora)
        self.model = model

    def _batch(self, texts: Sequence[str]):
        return self.tokenizer(
            list(texts),
            padding=True,
            truncation=True,
            max_length=self.max_length,
            return_tensors="pt",
        )

    def train(
        self,
        examples: Sequence[dict[str, Any]],
        epochs: int,
        lr: float,
        batch_size: int,
        seed: int,
    ) -> list[float]:
        """Epochs of AdamW on soft two-class cross-entropy, each example weighted so that the
        examples labelled at least 0.5 and those below weigh the same in all (a policy's
        distinct programs are mostly failures: unweighted, predicting "fails" everywhere is
        nearly optimal); the mean loss of each epoch."""
        weights = class_weights([e["label"] >= 0.5 for e in examples])
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(trainable, lr=lr)
        rng = random.Random(seed)
        order = list(range(len(examples)))
        losses = []
        self.model.train()
        for epoch in range(epochs):
            rng.shuffle(order)
            total, start = 0.0, time.perf_counter()
            for first in range(0, len(order), batch_size):
                chosen = [examples[i] for i in order[first : first + batch_size]]
                inputs = self._batch([e["text"] for e in chosen])
                batch = order[first : first + batch_size]
                labels = torch.tensor([e["label"] for e in chosen], dtype=torch.float32)
                weight = torch.tensor([weights[i] for i in batch], dtype=torch.float32)
                logits = self.model(**inputs).logits.float()  # (B, 2)
                target = torch.stack([1 - labels, labels], dim=1)
                per_example = -(target * torch.log_softmax(logits, dim=-1)).sum(dim=1)
                loss = (per_example * weight).sum() / weight.sum()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(trainable, 1.0)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                total += loss.item() * len(chosen)
            losses.append(total / max(len(order), 1))
            print(
                f"epoch {epoch + 1}/{epochs}: loss {losses[-1]:.4f} "
                f"({time.perf_counter() - start:.1f}s, {len(order)} examples)",
                flush=True,
            )
        return losses

    def scores(self, texts: Sequence[str], batch_size: int = 64) -> list[float]:
        """P(label 1) for each text: what the ``scorer`` term computes."""
        self.model.eval()
        out: list[float] = []
        with torch.no_grad():
            for first in range(0, len(texts), batch_size):
                logits = self.model(**self._batch(texts[first : first + batch_size])).logits
                out += torch.softmax(logits.float(), dim=-1)[:, 1].tolist()
        return out

    def save(self, out: Path) -> None:
        model = self.model
        if hasattr(model, "merge_and_unload"):  # LoRA: a plain HF model for the scorer
            model = model.merge_and_unload()
        model.save_pretrained(out)
        self.tokenizer.save_pretrained(out)
