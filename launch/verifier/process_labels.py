"""Step labels for a process verifier without annotation, the Monte Carlo way (Wang et al. 2024,
"Math-Shepherd").

For a program the policy wrote, cut into steps (``algorithm.rewards.steps``), each prefix
``steps[:i]`` is continued ``samples`` times by the policy and every continuation is executed
against the problem's tests: the prefix's label is the fraction that pass, an estimate of "can
this partial program still be completed into a correct one". The whole program's label is its
own verdict. A continuation whose run is an infra error is masked, not counted as a failure; a
prefix with no judged continuation has no label.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from algorithm.rewards.steps import step_prefixes
from common.prompts import build_program
from common.types import (
    Completion,
    ExecutionJob,
    ExecutionResult,
    Problem,
    RolloutRequest,
    Verdict,
)

Generate = Callable[[list[RolloutRequest]], list[Completion]]
Execute = Callable[[list[ExecutionJob]], list[ExecutionResult]]
Encode = Callable[[str], list[int]]


@dataclass(frozen=True)
class StepLabel:
    """One prefix of one program and the fraction of its continuations that pass."""

    problem_id: str
    text: str  # prompt + prefix: what the verifier scores
    step: int  # 1-based: the prefix holds this many steps
    steps: int  # of the whole program
    label: float


def mc_step_labels(
    programs: Sequence[tuple[Problem, str]],
    generate: Generate,
    execute: Execute,
    encode: Encode,
    samples: int,
    rule: str = "line",
    seed: int = 0,
) -> list[StepLabel]:
    """Labels of every step prefix of every ``(problem, completion)``: the last prefix (the whole
    completion) by its own verdict, each earlier one by ``samples`` continuations."""
    requests, owners = [], []
    whole: list[tuple[int, str]] = []  # (program index, completion)
    for p, (problem, completion) in enumerate(programs):
        prefixes = step_prefixes(completion, rule)
        whole.append((p, completion))
        for i, prefix in enumerate(prefixes[:-1]):
            rng = random.Random(f"{seed}/mc/{problem.problem_id}/{p}/{i}")
            requests.append(
                RolloutRequest(
                    request_id=f"mc/{p}/{i}",
                    prompt_token_ids=tuple(encode(problem.prompt + prefix)),
                    seeds=tuple(rng.getrandbits(31) for _ in range(samples)),
                )
            )
            owners.append((p, i, prefix))
    continuations: dict[tuple[str, int], Completion] = {}
    if requests:
        continuations = {(c.request_id, c.sample_index): c for c in generate(requests)}
    jobs, keys = [], []
    for (p, i, prefix), request in zip(owners, requests, strict=True):
        problem = programs[p][0]
        for s in range(samples):
            text = prefix + continuations[(request.request_id, s)].text
            jobs.append(_job(problem, text))
            keys.append((p, i))
    for p, completion in whole:
        jobs.append(_job(programs[p][0], completion))
        keys.append((p, -1))
    passed: dict[tuple[int, int], list[bool]] = {}
    for key, result in zip(keys, execute(jobs), strict=True):
        passed.setdefault(key, [])
        if result.verdict is not Verdict.INFRA_ERROR:  # masked: no verdict, not a failure
            passed[key].append(result.passed)
    return _labels(programs, passed, rule)


def _labels(
    programs: Sequence[tuple[Problem, str]], passed: dict[tuple[int, int], list[bool]], rule: str
) -> list[StepLabel]:
    """Each prefix's pass fraction over its judged continuations (the whole program: its own
    verdict); a prefix none of whose runs got a verdict has no label and is left out."""
    labels = []
    for p, (problem, completion) in enumerate(programs):
        prefixes = step_prefixes(completion, rule)
        for i, prefix in enumerate(prefixes):
            outcomes = passed[(p, -1 if i == len(prefixes) - 1 else i)]
            if not outcomes:
                continue
            labels.append(
                StepLabel(
                    problem.problem_id,
                    problem.prompt + prefix,
                    i + 1,
                    len(prefixes),
                    sum(outcomes) / len(outcomes),
                )
            )
    return labels


def _job(problem: Problem, completion: str) -> ExecutionJob:
    return problem.job(build_program(problem, completion))
