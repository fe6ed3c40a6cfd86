"""Turning a list of :class:`TrainSample` into padded micro-batches that fit a token budget.

Budget = padded tokens (rows x longest row), because that is what activations cost. Samples are
sorted by length before greedy packing so that rows of similar length share a micro-batch and
little of the budget is spent on padding. Padding is on the right (see ``logprobs.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from common.types import TrainSample


@dataclass(frozen=True)
class SharedPrompts:
    """Which rows of a micro-batch share a prompt: the logprob function runs ``first`` (one row
    per distinct prompt) through the model and lets every row attend to its prompt's keys and
    values (``logprobs.py``)."""

    lengths: Tensor  # (B,) each row's prompt length
    index: Tensor  # (B,) each row's distinct prompt, 0..U-1
    first: Tensor  # (U,) the first row holding each distinct prompt

    @property
    def saves(self) -> bool:
        """Whether any two rows share a prompt (else the shared forward saves nothing)."""
        return len(self.first) < len(self.index)

    @staticmethod
    def of(rows: Sequence[TrainSample], device: torch.device | str) -> SharedPrompts:
        groups = prompt_groups(rows)
        index = [0] * len(rows)
        for number, group in enumerate(groups):
            for row in group:
                index[row] = number
        return SharedPrompts(
            lengths=torch.tensor([len(s.prompt_token_ids) for s in rows], device=device),
            index=torch.tensor(index, device=device),
            first=torch.tensor([group[0] for group in groups], device=device),
        )


@dataclass
class MicroBatch:
    """Right-padded tensors for a subset of a batch; ``indices`` index the original list."""

    indices: list[int]
    input_ids: Tensor  # (B, T) prompt + completion + pad
    attention_mask: Tensor  # (B, T) 1 on real tokens
    completion_mask: Tensor  # (B, T) 1 on completion tokens
    sampler_logprobs: Tensor  # (B, T) vLLM's logprob of each completion token, 0 elsewhere
    advantages: Tensor  # (B,)
    old_logprobs: Tensor | None = None  # (B, T) learner logprobs before the update, if given
    ref_logprobs: Tensor | None = None  # (B, T) reference logprobs, if given
    temperatures: Tensor | None = None  # (B,) when a row was sampled at its own temperature
    prompts: SharedPrompts | None = None  # which rows share a prompt, when asked

    @property
    def num_completion_tokens(self) -> int:
        return int(self.completion_mask.sum().item())


def validate_samples(samples: Sequence[TrainSample]) -> None:
    """Refuse malformed samples early, with the reason, instead of a shape error mid-step."""
    if not samples:
        raise ValueError("train_step needs at least one sample")
    for i, s in enumerate(samples):
        if not s.prompt_token_ids:
            raise ValueError(f"sample {i}: empty prompt; the first completion token needs context")
        if not s.completion_token_ids:
            raise ValueError(f"sample {i}: empty completion; there is nothing to train on")
        if len(s.sampler_logprobs) != len(s.completion_token_ids):
            raise ValueError(
                f"sample {i}: {len(s.sampler_logprobs)} sampler logprobs for "
                f"{len(s.completion_token_ids)} completion tokens; they must be aligned one to one"
            )
        if s.loss_mask is not None and len(s.loss_mask) != len(s.completion_token_ids):
            raise ValueError(
                f"sample {i}: a loss mask of {len(s.loss_mask)} for "
                f"{len(s.completion_token_ids)} completion tokens"
            )
        if s.loss_mask is not None and not any(s.loss_mask):
            raise ValueError(f"sample {i}: the loss mask trains on no token")


def sample_length(sample: TrainSample) -> int:
    """Tokens of a sample's row: prompt and completion."""
    return len(sample.prompt_token_ids) + len(sample.completion_token_ids)


def prompt_groups(samples: Sequence[TrainSample]) -> list[list[int]]:
    """Sample indices by prompt (equal prompt token ids), in order of first appearance."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, s in enumerate(samples):
        groups.setdefault(tuple(s.prompt_token_ids), []).append(i)
    return list(groups.values())


def pack_micro_batches(
    samples: Sequence[TrainSample], token_budget: int, share_prompts: bool = False
) -> list[list[int]]:
    """Group sample indices so that rows x longest row <= ``token_budget`` per group.

    With ``share_prompts`` the rows of one prompt are kept together and a group costs what the
    shared-prompt forward runs: distinct prompts x longest prompt + rows x longest completion.
    A sample longer than the budget on its own still gets a micro-batch of one.
    """
    if share_prompts:
        return _pack_shared(samples, token_budget)
    order = sorted(range(len(samples)), key=lambda i: sample_length(samples[i]))
    groups: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for i in order:
        length = sample_length(samples[i])
        if current and (len(current) + 1) * max(longest, length) > token_budget:
            groups.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, length)
    if current:
        groups.append(current)
    return groups


def _pack_shared(samples: Sequence[TrainSample], token_budget: int) -> list[list[int]]:
    """``pack_micro_batches`` with each prompt's rows adjacent, prompts in order of their
    longest row (so micro-batches hold rows of similar length) and rows by length within."""
    by_prompt = [sorted(r, key=lambda i: sample_length(samples[i])) for r in prompt_groups(samples)]
    by_prompt.sort(key=lambda r: sample_length(samples[r[-1]]))
    groups: list[list[int]] = []
    current: list[int] = []
    prompts = longest_prompt = longest_completion = 0  # distinct prompts in ``current``
    for members in by_prompt:
        for k, i in enumerate(members):  # a prompt's rows are adjacent: k == 0 is a new prompt
            p, c = len(samples[i].prompt_token_ids), len(samples[i].completion_token_ids)
            prompt_cost = (prompts + (k == 0)) * max(longest_prompt, p)
            if (
                current
                and prompt_cost + (len(current) + 1) * max(longest_completion, c) > token_budget
            ):
                groups.append(current)
                current, prompts, longest_prompt, longest_completion = [], 0, 0, 0
            prompts += k == 0 or not current
            current.append(i)
            longest_prompt, longest_completion = max(longest_prompt, p), max(longest_completion, c)
    if current:
        groups.append(current)
    return groups


def collate(
    samples: Sequence[TrainSample],
    indices: list[int],
    pad_token_id: int = 0,
    device: torch.device | str = "cpu",
    *,
    old_logprobs: Sequence[Tensor] | None = None,
    ref_logprobs: Sequence[Tensor] | None = None,
    temperature: float = 1.0,
    share_prompts: bool = False,
) -> MicroBatch:
    """Right-pad the chosen samples into tensors on ``device``.

    ``old_logprobs`` / ``ref_logprobs``: optional per-sample 1-D tensors (one value per
    completion token, indexed like ``samples``), placed at the completion positions. When a
    chosen sample carries its own sampling temperature, ``temperatures`` holds every row's
    (``temperature`` for the others).
    """
    rows = [samples[i] for i in indices]
    width = max(sample_length(s) for s in rows)
    shape = (len(rows), width)
    input_ids = torch.full(shape, pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros(shape, dtype=torch.long)
    completion_mask = torch.zeros(shape, dtype=torch.float32)
    sampler_logprobs = torch.zeros(shape, dtype=torch.float32)
    for row, s in enumerate(rows):
        p, c = len(s.prompt_token_ids), len(s.completion_token_ids)
        input_ids[row, : p + c] = torch.tensor(s.prompt_token_ids + s.completion_token_ids)
        attention_mask[row, : p + c] = 1
        # Episode feedback (loss_mask 0) is context, like the prompt: no logprob, no loss, no KL.
        own = 1.0 if s.loss_mask is None else torch.tensor(s.loss_mask, dtype=torch.float32)
        completion_mask[row, p : p + c] = own
        sampler_logprobs[row, p : p + c] = torch.tensor(s.sampler_logprobs, dtype=torch.float32)
    advantages = torch.tensor([s.advantage for s in rows], dtype=torch.float32)
    temperatures = None
    if any(s.temperature is not None for s in rows):
        own = [temperature if s.temperature is None else s.temperature for s in rows]
        temperatures = torch.tensor(own, dtype=torch.float32).to(device)
    return MicroBatch(
        indices=list(indices),
        input_ids=input_ids.to(device),
        attention_mask=attention_mask.to(device),
        completion_mask=completion_mask.to(device),
        sampler_logprobs=sampler_logprobs.to(device),
        advantages=advantages.to(device),
        old_logprobs=_place(old_logprobs, samples, indices, shape, device),
        ref_logprobs=_place(ref_logprobs, samples, indices, shape, device),
        temperatures=temperatures,
        prompts=SharedPrompts.of(rows, device) if share_prompts else None,
    )


def _place(
    values: Sequence[Tensor] | None,
    samples: Sequence[TrainSample],
    indices: list[int],
    shape: tuple[int, int],
    device: torch.device | str,
) -> Tensor | None:
    if values is None:
        return None
    out = torch.zeros(shape, dtype=torch.float32)
    for row, i in enumerate(indices):
        p, c = len(samples[i].prompt_token_ids), len(samples[i].completion_token_ids)
        out[row, p : p + c] = values[i].float()
    return out.to(device)


def completion_rows(values: Tensor, samples: Sequence[TrainSample], indices: list[int]) -> list:
    """Inverse of ``_place``: the completion span of each row of (B, T) ``values``, on CPU."""
    values = values.detach().float().cpu()
    rows = []
    for row, i in enumerate(indices):
        start = len(samples[i].prompt_token_ids)
        rows.append(values[row, start : start + len(samples[i].completion_token_ids)].clone())
    return rows
