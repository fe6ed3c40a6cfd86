"""The verifier's train / held-out split: by problem, with related problems kept together.

Held-out problems must be ones the verifier never trained on, and two kinds of problem are the
same problem in disguise: a derived task and the task it came from (a repair task,
``"{id}/repair/{k}"``, holds the original's reference with one mutation; its records carry
``source_task_id``), and problems whose prompts are the same text (the model sees the same
input, so training on one is training on the other: all ``synthetic_hidden`` problems share
one). Problems linked by either relation, directly or through a chain, form one *family*
(union-find), and a family lands wholly on one side.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Mapping
from typing import Any

#: a repair task's id (``launch.selfplay.make_repairs``): the original's id before
#: ``/repair/<k>``; for records written before they carried ``source_task_id``
REPAIR_ID = re.compile(r"^(?P<source>.+)/repair/\d+$")


class SplitError(ValueError):
    """Too few problem families to hold any out."""


def problem_families(rows: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Each record's problem id -> its family's representative (the family's smallest id).

    A record links its problem with its ``source_task_id`` (or, without one, the id a repair
    task's id names), and with every problem whose record has the same ``prompt``."""
    parent: dict[str, str] = {}

    def find(node: str) -> str:
        parent.setdefault(node, node)
        while parent[node] != node:
            parent[node] = parent[parent[node]]  # path halving
            node = parent[node]
        return node

    def union(a: str, b: str) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)  # the smallest id represents the family

    by_prompt: dict[str, str] = {}
    problems: set[str] = set()
    for row in rows:
        problem = str(row["problem_id"])
        problems.add(problem)
        find(problem)
        source = row.get("source_task_id") or _repair_source(problem)
        if source:
            union(problem, str(source))
        if row.get("prompt") is not None:
            union(problem, by_prompt.setdefault(row["prompt"], problem))
    return {problem: find(problem) for problem in problems}


def _repair_source(problem_id: str) -> str | None:
    match = REPAIR_ID.match(problem_id)
    return match["source"] if match else None


def split_families(
    families: Mapping[str, str], held_out: float, seed: int
) -> tuple[list[str], list[str]]:
    """Training and held-out problem ids, disjoint, each family on one side; about
    ``held_out`` of the problems held out, at least one family on each side. Families are
    shuffled by ``seed`` and held out in that order until enough problems are; when every
    family is one problem this is a seeded shuffle of the sorted ids, cut at ``held_out``."""
    members: dict[str, list[str]] = {}
    for problem in sorted(families):
        members.setdefault(families[problem], []).append(problem)
    if len(members) < 2:
        raise SplitError(
            f"the records hold {len(families)} problem(s) in {len(members)} famil"
            f"{'y' if len(members) == 1 else 'ies'} (problems sharing a prompt, or derived "
            "from one another, count as one); a split by problem needs at least 2"
        )
    order = sorted(members)
    random.Random(seed).shuffle(order)
    wanted = min(max(1, round(held_out * len(families))), len(families) - 1)
    held: set[str] = set()  # families
    count = 0
    for family in order[:-1]:  # the last family always trains
        if count >= wanted:
            break
        held.add(family)
        count += len(members[family])
    train = [p for family in order if family not in held for p in members[family]]
    return sorted(train), sorted(p for family in held for p in members[family])
