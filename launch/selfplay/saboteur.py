"""The self-play saboteur: the policy breaks correct programs, and fixes the bugs it wrote.

With ``selfplay.saboteur`` on, ``selfplay.saboteur_prompts`` of each step's prompts go to the
saboteur role: the prompt holds a training problem's reference program (once it has passed every
test) and asks for a changed program that still runs but fails at least one test. The sandbox
decides whether a bug is valid (:class:`launch.selfplay.repairs.BugJudge`, the rule
``launch.selfplay.make_repairs`` follows); the first ``selfplay.bugs_per_group`` distinct valid
bugs of each saboteur group become repair prompts, each posed to a *fixer* group in the same
step and rewarded by execution against the original tests.

A fixer's reward is its execution reward; a saboteur's is how hard its bug was for the fixers
(``algorithm/rewards/selfplay.py``). A prompt that would leave no room for an answer in
``model.max_model_len`` is not posed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from algorithm.rewards.selfplay import bug_hardness, saboteur_rewards
from common.config import Config
from common.prompts import encode_prompt, render_prompt, special_strings
from common.types import Problem, Verdict
from launch.selfplay.mutations import normalised
from launch.selfplay.repairs import BugCheck, BugJudge, Execute, reference_program, repair_prompt

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
    collector's; ``sample(tag, indices, posed=...)`` is the collector's sampling and
    ``execute(jobs, stop_at_first_failure)`` its sandbox, which checks the bugs.
    """

    def __init__(
        self,
        config: Config,
        raw: list[Problem],
        template: str,
        tokenizer,
        sample: Callable,
        execute: Execute,
    ) -> None:
        self.config = config
        self.raw = raw
        self.template = template
        self.tokenizer = tokenizer
        self.sample = sample
        self.judge = BugJudge(execute)
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
        checks_of = self._check_bugs(indices, saboteurs, keys_of)
        fix_indices, fix_posed, fix_keys = self._fixer_tasks(indices, saboteurs, keys_of, checks_of)
        fixers = self.sample(f"{step}.fixer", fix_indices, posed=fix_posed) if fix_posed else []
        hardness = {}
        solved = judged = 0
        for key, group in zip(fix_keys, fixers, strict=True):
            passed = [r.passed for r in group.results if r.verdict is not Verdict.INFRA_ERROR]
            difficulty = bug_hardness(passed)
            if difficulty is not None:
                hardness[key] = difficulty
            solved += sum(passed)
            judged += len(passed)
        valid = total = 0
        for group, keys, checks in zip(saboteurs, keys_of, checks_of, strict=True):
            group.role = "saboteur"
            group.rewards = saboteur_rewards(checks, keys, hardness)
            group.terms = {}
            judged_bugs = [c for c in checks if c.status != "infra_error"]
            valid += sum(c.valid for c in judged_bugs)
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
        """The problems of ``indices`` that have a reference to break, which passes its tests,
        and room for an answer, and their saboteur prompts."""
        indices = [i for i in indices if self.raw[i].reference_solution.strip()]
        references = self.judge.references([self.raw[i] for i in indices])
        posed, kept = [], []
        for i, reference in zip(indices, references, strict=True):
            raw = self.raw[i]
            if not reference.passed:
                continue  # nothing correct to break (or the sandbox broke: not this step)
            program = reference_program(raw).rstrip()
            task = self._pose(
                raw, SABOTEUR_PROMPT.format(task=raw.prompt, program=program), "saboteur"
            )
            if task is not None:
                posed.append(task)
                kept.append(i)
        return kept, posed

    def _check_bugs(
        self, indices: list[int], saboteurs: list, keys_of: list[list[str | None]]
    ) -> list[list[BugCheck]]:
        """Each saboteur sample's bug check, group by group. The sampling's own results do not
        decide: they may stop at the first failing test (a binary reward) and come from the
        result cache, while a valid bug needs every test's verdict, twice."""
        candidates = [
            (self.raw[index], program)
            for index, group in zip(indices, saboteurs, strict=True)
            for program in group.programs
        ]
        checks = iter(self.judge.check(candidates))
        return [[next(checks) for _ in keys] for keys in keys_of]

    def _fixer_tasks(
        self,
        indices: list[int],
        saboteurs: list,
        keys_of: list[list[str | None]],
        checks_of: list[list[BugCheck]],
    ) -> tuple[list[int], list[Problem], list[str]]:
        """The repair prompts of each saboteur group's first ``selfplay.bugs_per_group`` distinct
        valid bugs that leave room for an answer: (problem indices, prompts, bug keys)."""
        fix_indices, fix_posed, fix_keys = [], [], []
        for index, group, keys, checks in zip(indices, saboteurs, keys_of, checks_of, strict=True):
            chosen: list[str] = []
            for program, key, check in zip(group.programs, keys, checks, strict=True):
                if len(chosen) == self.config.selfplay.bugs_per_group:
                    break
                if key is None or key in chosen or not check.valid:
                    continue
                text = repair_prompt(self.raw[index], program, check.result)
                task = self._pose(self.raw[index], text, f"fix{len(chosen) + 1}")
                if task is None:
                    continue
                chosen.append(key)
                fix_indices.append(index)
                fix_keys.append(key)
                fix_posed.append(task)
        return fix_indices, fix_posed, fix_keys
