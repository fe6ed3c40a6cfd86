"""The learned scorer: a reward model (or process reward model) in its own actor, a plain class
made a Ray actor at launch: prompt and completion texts in, one float per completion out. The
heads and options are described in docs/rewards.md ("scorer").

The text is ``prompt + completion``, cut from the *left* to ``max_length`` tokens: the score is
read at the last token.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import torch
from safetensors import safe_open

from algorithm.rewards.steps import aggregate_steps, step_prefixes
from common.config import ScorerOptions
from common.model_files import ModelFiles, local_path

logger = logging.getLogger(__name__)

_V_HEAD_KEY = re.compile(r"(^|\.)v_head(\.summary)?\.(weight|bias)$")


class RewardScorer:
    """Hosts one scoring model and scores completions in batches."""

    def __init__(self, model_path: str | ModelFiles, options: ScorerOptions) -> None:
        # lazy: transformers loads in the scorer's actor, not in the driver
        from transformers import AutoTokenizer

        model_path = local_path(model_path)  # fetched once per host that lacks it
        self.options = options
        self.dtype = getattr(torch, options.dtype)
        self.device = "cuda" if options.num_gpus > 0 and torch.cuda.is_available() else "cpu"
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.tokenizer.truncation_side = "left"
        self.tokenizer.padding_side = "left"  # the last position is every text's last token
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        if options.head == "classifier":
            self._load_classifier(model_path)
        else:
            self._load_value_head(model_path)
        self.model.to(self.device).eval()

    def _load_classifier(self, model_path: str) -> None:
        from transformers import AutoModelForSequenceClassification  # lazy: as in __init__

        self.model = AutoModelForSequenceClassification.from_pretrained(
            model_path, dtype=self.dtype
        )
        labels = self.model.config.num_labels
        if labels not in (1, 2):
            raise ValueError(
                f"scorer {model_path}: num_labels is {labels}; a reward model needs 1 (a raw "
                "score) or 2 (the probability of label 1)"
            )
        if self.model.config.pad_token_id is None:
            self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.v_head = None

    def _load_value_head(self, model_path: str) -> None:
        from transformers import AutoModel  # lazy: as in __init__

        self.model = AutoModel.from_pretrained(model_path, dtype=self.dtype)
        tensors = {}
        for file in sorted(Path(model_path).glob("*.safetensors")):
            with safe_open(str(file), framework="pt") as handle:
                for key in handle.keys():  # noqa: SIM118 (safe_open is not a dict)
                    match = _V_HEAD_KEY.search(key)
                    if match:
                        tensors[match.group(3)] = handle.get_tensor(key)
        if "weight" not in tensors:
            raise ValueError(
                f"scorer {model_path}: head = 'value_head' but no v_head weight in its "
                "*.safetensors files (expected a key like 'v_head.summary.weight')"
            )
        weight = tensors["weight"].reshape(1, -1)  # (1, hidden)
        self.v_head = torch.nn.Linear(weight.shape[1], 1, bias="bias" in tensors)
        with torch.no_grad():
            self.v_head.weight.copy_(weight)
            if "bias" in tensors:
                self.v_head.bias.copy_(tensors["bias"].reshape(1))
        self.v_head.to(self.device, self.dtype)

    def score(self, prompts: list[str], completions: list[str]) -> list[float]:
        """One score per completion (aggregated over its steps when ``step_split`` is set)."""
        if len(prompts) != len(completions):
            raise ValueError(f"{len(prompts)} prompts for {len(completions)} completions")
        rule = self.options.step_split
        if not rule:
            return self.score_texts([p + c for p, c in zip(prompts, completions, strict=True)])
        texts, owners = [], []
        for k, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
            for prefix in step_prefixes(completion, rule):
                texts.append(prompt + prefix)
                owners.append(k)
        flat = self.score_texts(texts)
        per_completion: list[list[float]] = [[] for _ in completions]
        for owner, value in zip(owners, flat, strict=True):
            per_completion[owner].append(value)
        return [aggregate_steps(s, self.options.step_aggregate) for s in per_completion]

    def score_texts(self, texts: list[str]) -> list[float]:
        """Raw scores of whole texts, ``batch_size`` at a time."""
        scores: list[float] = []
        size = self.options.batch_size
        for start in range(0, len(texts), size):
            encoded = self.tokenizer(
                texts[start : start + size],
                truncation=True,
                max_length=self.options.max_length,
                padding=True,
                return_tensors="pt",
            ).to(self.device)
            with torch.inference_mode():
                scores.extend(self._forward(encoded).float().tolist())
        return scores

    def _forward(self, encoded):
        if self.v_head is None:
            logits = self.model(**encoded).logits  # (B, num_labels)
            if logits.shape[-1] == 1:
                return logits[:, 0]
            return torch.softmax(logits.float(), dim=-1)[:, 1]
        hidden = self.model(**encoded).last_hidden_state  # (B, T, H); left-padded
        return self.v_head(hidden[:, -1, :])[:, 0]
