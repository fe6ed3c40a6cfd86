"""Where training problems come from, and the order they are drawn in.

``data.source`` is ``synthetic`` or ``synthetic_hidden`` (the demo tasks, already in their final
completion form, so the prompt template does not apply), a problems file or a Hugging Face
dataset name (:mod:`common.datasets`); dataset prompts are rendered for the model with
``data.prompt_template`` (:mod:`common.prompts`).

The sampler is a pure function of (seed, position): a resumed run that restores the position
sees exactly the prompts an uninterrupted run would have seen. Pass-rate-aware orders are in
:mod:`launch.data.curriculum`.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from common.config import Config, DataConfig
from common.datasets import load_dataset
from common.prompts import encode_prompt, render_problems, resolve_template
from common.types import Problem
from launch.data.tasks import SYNTHETIC_SOURCES


def load_problems(config: DataConfig, tokenizer=None) -> list[Problem]:
    """The training problems named by ``data.source``, with prompts rendered for the model.

    A dataset source needs the ``tokenizer`` (its chat template decides what ``auto`` means);
    the synthetic task does not.
    """
    return load_rendered(
        config.source,
        config.split,
        config.format,
        config.prompt_template,
        tokenizer,
        config.max_problems,
    )


def load_rendered(
    source: str, split: str | None, fmt: str, template: str, tokenizer, limit: int = 0
) -> list[Problem]:
    """Problems from ``source`` with prompts rendered by ``template`` for ``tokenizer``.

    The synthetic tasks have no splits and are already in their final completion form.
    """
    if source in SYNTHETIC_SOURCES:
        return load_raw(source, split, fmt, limit)
    if tokenizer is None:
        raise ValueError(f"rendering prompts for {source!r} needs the model's tokenizer")
    return render_problems(load_raw(source, split, fmt, limit), template, tokenizer)


def load_eval_problems(config: Config, tokenizer) -> list[Problem]:
    """The held-out problems of ``eval``: ``eval.source`` (default: ``data.source``) at
    ``eval.split``, rendered as the training prompts are."""
    data, ev = config.data, config.eval
    source = ev.source or data.source
    return load_rendered(
        source, ev.split, data.format, data.prompt_template, tokenizer, ev.max_problems
    )


def encode_prompts(problems: Sequence[Problem], tokenizer) -> list[tuple[int, ...]]:
    """Every problem's prompt as the engines get it (:func:`common.prompts.encode_prompt`)."""
    return [tuple(encode_prompt(tokenizer, p.prompt)) for p in problems]


@dataclass(frozen=True)
class RunProblems:
    """A training run's problems: the training set, its prompts' token ids (encoded once, for
    the length check and the engines) and the held-out set (empty without ``eval.every``)."""

    train: list[Problem]
    prompt_ids: list[tuple[int, ...]]
    held_out: list[Problem]


def load_raw(source: str, split: str | None, fmt: str, limit: int = 0) -> list[Problem]:
    """Problems from ``source`` with their task text as ``prompt`` (not rendered for a model)."""
    if source in SYNTHETIC_SOURCES:
        problems = SYNTHETIC_SOURCES[source]()
        return problems[:limit] if limit else problems
    return load_dataset(source, split, fmt, limit)


def rendered_template(data: DataConfig, tokenizer) -> str:
    """``chat`` or ``plain``: the template the run's prompts are written in (the synthetic
    tasks are completion prompts whatever the tokenizer)."""
    if data.source in SYNTHETIC_SOURCES:
        return "plain"
    return resolve_template(data.prompt_template, tokenizer)


class PromptSampler:
    """Draws problems epoch by epoch, each epoch a fresh permutation seeded by (seed, epoch)."""

    def __init__(self, num_problems: int, seed: int, position: int = 0) -> None:
        self.num_problems = num_problems
        self.seed = seed
        self.position = position

    def _order(self, epoch: int) -> list[int]:
        order = list(range(self.num_problems))
        random.Random(f"{self.seed}/{epoch}").shuffle(order)
        return order

    def next_indices(self, count: int) -> list[int]:
        """The next ``count`` problem indices; advances the position."""
        indices = []
        for pos in range(self.position, self.position + count):
            epoch, offset = divmod(pos, self.num_problems)
            indices.append(self._order(epoch)[offset])
        self.position += count
        return indices
