"""Repair prompts: a task, a buggy program, the test it fails and the sandbox's report on it.

Both ``launch.make_repairs`` (bugs injected by :mod:`launch.data.mutations`) and the self-play
saboteur (bugs the policy wrote, :mod:`launch.loop.saboteur`) pose a repair with this text, so a
fixer trained on one sees the other's prompts in the same form.
"""

from __future__ import annotations

from common.types import ExecutionResult, Problem, Verdict

PROMPT = """{task}

This program is meant to solve the task, but it has a bug:

```python
{buggy}
```

It fails this test:
{test}
The sandbox reported: {report}

Write the corrected program."""


def reference_program(problem: Problem) -> str:
    """The reference as a whole program: after the header of a completion-style problem."""
    return problem.program_prefix + problem.reference_solution


def _first_failure(problem: Problem, result: ExecutionResult) -> tuple[str, str]:
    """The failing test and the sandbox's report on it (load errors: the program's own)."""
    failed = next((i for i, v in enumerate(result.test_verdicts) if v is not Verdict.PASSED), 0)
    test = problem.tests[failed] if problem.tests else ""
    return test, f"{result.verdict.value}: {result.detail or 'the assertion failed'}"


def repair_prompt(problem: Problem, buggy: str, result: ExecutionResult) -> str:
    """The task text of a repair: the task, the buggy program, its first failing test with the
    sandbox's report, and for a completion-style problem its header to continue."""
    test, report = _first_failure(problem, result)
    text = PROMPT.format(task=problem.prompt, buggy=buggy, test=test, report=report)
    return f"{text}\n\n{problem.program_prefix}" if problem.program_prefix else text
