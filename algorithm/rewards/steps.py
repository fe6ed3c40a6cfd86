"""Steps of a completion for a process reward model (PRM): split, score every prefix, aggregate.

A PRM judges a solution step by step; the completion's reward is an aggregate of the scores of
its prefixes ``prompt + steps[:i+1]``. ``min`` is the usual choice (a solution is as good as
its worst step, Lightman et al. 2023), ``mean`` is smoother, ``last`` scores the whole
completion like an outcome reward model but through the PRM's head.

Steps are cut right *after* each delimiter match, and whitespace-only pieces are merged into the
step before them, so ``"".join(steps) == completion`` and every prefix is a prefix of the text.
"""

from __future__ import annotations

import re
import statistics

SPLIT_RULES = {"line": r"\n", "blank_line": r"\n[ \t]*\n"}
AGGREGATES = ("min", "mean", "last")


def split_steps(completion: str, rule: str) -> list[str]:
    """``completion`` cut into steps by ``rule`` (``line``, ``blank_line`` or a regex).

    Always at least one step, so an empty completion still gets a score.
    """
    pattern = re.compile(SPLIT_RULES.get(rule, rule))
    pieces, start = [], 0
    for match in pattern.finditer(completion):
        if match.end() > start:
            pieces.append(completion[start : match.end()])
            start = match.end()
    if start < len(completion):
        pieces.append(completion[start:])
    steps: list[str] = []
    for piece in pieces:
        if steps and not piece.strip():
            steps[-1] += piece
        else:
            steps.append(piece)
    if len(steps) > 1 and not steps[0].strip():  # leading blank lines belong to the first step
        steps[1] = steps[0] + steps[1]
        del steps[0]
    return steps or [completion]


def step_prefixes(completion: str, rule: str) -> list[str]:
    """``steps[:1], steps[:2], ...`` joined: the texts a PRM scores for one completion."""
    steps = split_steps(completion, rule)
    return ["".join(steps[: i + 1]) for i in range(len(steps))]


def aggregate_steps(scores: list[float], how: str) -> float:
    """One completion's reward from its step scores: ``min``, ``mean`` or ``last``."""
    if not scores:
        raise ValueError("no step scores to aggregate: every completion has at least one step")
    if how == "min":
        return min(scores)
    if how == "mean":
        return statistics.fmean(scores)
    if how == "last":
        return scores[-1]
    raise ValueError(f"unknown step aggregate {how!r}: expected one of {', '.join(AGGREGATES)}")
