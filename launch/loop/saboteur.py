"""The self-play saboteur: the policy breaks correct programs, and fixes the bugs it wrote.

With ``selfplay.saboteur`` on, ``selfplay.saboteur_prompts`` of each step's prompts go to the
saboteur role: the prompt holds a training problem's reference program and asks for a changed
program that still runs but fails at least one of the problem's tests. The sandbox decides
whether a bug is *valid*: the program runs through the tests without an error and gives a
wrong answer in at least one. The first ``selfplay.bugs_per_group`` distinct valid bugs of each
saboteur group (distinct by normalised AST) become repair prompts, the same as
``launch.make_repairs`` writes, and each is posed to a *fixer* group of G samples in the same
step, rewarded by execution against the original tests.

Rewards: a fixer's is its execution reward; a saboteur's is validity times how hard its bug was
for the fixers, ``1 - solve rate`` of the bug's fixer group, and 0 for an invalid bug. A valid
bug that got no fixer group (beyond ``bugs_per_group``) has no measured difficulty and is masked
(reward None, not trained on), never scored 0. A prompt that would leave no room for an answer
in ``model.max_model_len`` is not posed. Both roles are the same policy, trained in the
same step, each with groups of its own; ``selfplay/bug_valid_frac`` and
``selfplay/fixer_solve_rate`` follow them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from common.config import Config
from common.prompts import encode_prompt, render_prompt, special_strings
from common.types import ExecutionResult, Problem, Verdict
from launch.data.mutations import normalised
from launch.data.repairs import reference_program, repair_prompt

METRICS = (
    "selfplay/bug_valid_frac",
    "selfplay/fixer_solve_rate",
    "selfplay/fixer_groups",
    "selfplay/saboteur_groups",
)

SABOTEUR_PROMPT = """{task}

This program solves the task correctly:

```python
{program}
```

Change it so that it still runs but fails at least one test of the task. Write the whole \
changed program."""


def is_valid_bug(result: ExecutionResult) -> bool:
    """The program still runs and gives a wrong answer: a test's assertion failed, and no test
    raised, timed out or ran out of memory first (a crash is no bug anyone must look for)."""
    return result.verdict is Verdict.FAILED


def saboteur_rewards(
    results: list[ExecutionResult], keys: list[str | None], hardness: dict[str, float]
) -> list[float | None]:
    """Each saboteur sample's reward: 0 for an invalid bug, ``hardness`` of its bug (by
    normalised program, ``keys``) when a fixer group measured it, else None (masked). A
    wrong-answer program without a key (one no fixer can be shown, see :func:`_key`) is no
    valid bug: 0."""
    rewards: list[float | None] = []
    for result, key in zip(results, keys, strict=True):
        if result.verdict is Verdict.INFRA_ERROR:
            rewards.append(None)  # the sandbox broke: nothing is known about the bug
        elif not is_valid_bug(result):
            rewards.append(0.0)
        else:
            rewards.append(hardness.get(key) if key is not None else 0.0)
    return rewards


def _key(group: int, program: str, markup: set[str]) -> str | None:
    """A bug's identity: its saboteur group and its program without formatting or comments.
    None for a program the parser gives up on (not a valid bug anyway), and for one that holds
    a special token's string (``markup``): the fixers' prompt would carry it, where the
    tokenizer reads it as the chat's own markup (a saboteur could write the fixers' prompt)."""
    if any(piece in program for piece in markup):
        return None
    try:
        return f"{group}:{normalised(program)}"
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


class Saboteur:
    """Poses the saboteur and fixer prompts of one step (see the module docstring).

    ``raw`` are the training problems with their task text (not rendered), in the order of the
    collector's; ``sample(tag, indices, posed=...)`` is the collector's sampling.
    """

    def __init__(
        self, config: Config, raw: list[Problem], template: str, tokenizer, sample: Callable
    ) -> None:
        self.config = config
        self.raw = raw
        self.template = template
        self.tokenizer = tokenizer
        self.sample = sample
        self.markup = special_strings(tokenizer)

    def _pose(self, problem: Problem, text: str, suffix: str) -> Problem | None:
        """``problem`` with the task text ``text``, rendered; None when it would not leave room
        for an answer in ``model.max_model_len`` (it is not posed this step)."""
        task = replace(problem, prompt=text, problem_id=f"{problem.problem_id}/{suffix}")
        task = replace(task, prompt=render_prompt(task, self.template, self.tokenizer))
        room = self.config.model.max_model_len - self.config.rollout.max_new_tokens
        return task if len(encode_prompt(self.tokenizer, task.prompt)) <= room else None

    def collect(self, step: int, indices: list[int]) -> tuple[list, dict[str, float]]:
        """The saboteur groups for ``indices`` and the fixer groups of their valid bugs."""
        indices, posed = self._saboteur_tasks(indices)
        if not posed:
            return [], dict.fromkeys(METRICS, 0.0)
        saboteurs = self.sample(f"{step}.saboteur", indices, posed=posed)
        keys_of = [
            [_key(position, program, self.markup) for program in group.programs]
            for position, group in enumerate(saboteurs)
        ]
        fix_indices, fix_posed, fix_keys = self._fixer_tasks(indices, saboteurs, keys_of)
        fixers = self.sample(f"{step}.fixer", fix_indices, posed=fix_posed) if fix_posed else []
        hardness = {}
        solved = judged = 0
        for key, group in zip(fix_keys, fixers, strict=True):
            verdicts = [r for r in group.results if r.verdict is not Verdict.INFRA_ERROR]
            rate = sum(r.passed for r in verdicts) / len(verdicts) if verdicts else None
            if rate is not None:
                hardness[key] = 1.0 - rate
            solved += sum(r.passed for r in verdicts)
            judged += len(verdicts)
        valid = total = 0
        for group, keys in zip(saboteurs, keys_of, strict=True):
            group.role = "saboteur"
            group.rewards = saboteur_rewards(group.results, keys, hardness)
            group.terms = {}
            judged_bugs = [r for r in group.results if r.verdict is not Verdict.INFRA_ERROR]
            valid += sum(is_valid_bug(r) for r in judged_bugs)
            total += len(judged_bugs)
        for group in fixers:
            group.role = "fixer"
        metrics = {
            "selfplay/bug_valid_frac": valid / max(total, 1),
            "selfplay/fixer_solve_rate": solved / max(judged, 1),
            "selfplay/fixer_groups": float(len(fixers)),
            "selfplay/saboteur_groups": float(len(saboteurs)),
        }
        return saboteurs + fixers, metrics

    def _saboteur_tasks(self, indices: list[int]) -> tuple[list[int], list[Problem]]:
        """The problems of ``indices`` that have a reference to break and room for an answer,
        and their saboteur prompts."""
        posed, kept = [], []
        for i in indices:
            raw = self.raw[i]
            if not raw.reference_solution.strip():
                continue  # nothing correct to break
            program = reference_program(raw).rstrip()
            task = self._pose(
                raw, SABOTEUR_PROMPT.format(task=raw.prompt, program=program), "saboteur"
            )
            if task is not None:
                posed.append(task)
                kept.append(i)
        return kept, posed

    def _fixer_tasks(
        self, indices: list[int], saboteurs: list, keys_of: list[list[str | None]]
    ) -> tuple[list[int], list[Problem], list[str]]:
        """The repair prompts of each saboteur group's first ``selfplay.bugs_per_group`` distinct
        valid bugs that leave room for an answer: (problem indices, prompts, bug keys)."""
        fix_indices, fix_posed, fix_keys = [], [], []
        for index, group, keys in zip(indices, saboteurs, keys_of, strict=True):
            chosen: list[str] = []
            for program, key, result in zip(group.programs, keys, group.results, strict=True):
                if len(chosen) == self.config.selfplay.bugs_per_group:
                    break
                if key is None or key in chosen or not is_valid_bug(result):
                    continue
                text = repair_prompt(self.raw[index], program, result)
                task = self._pose(self.raw[index], text, f"fix{len(chosen) + 1}")
                if task is None:
                    continue
                chosen.append(key)
                fix_indices.append(index)
                fix_keys.append(key)
                fix_posed.append(task)
        return fix_indices, fix_posed, fix_keys
