"""Repair tasks: which programs are bugs, and the prompt that poses one.

Both ``launch.selfplay.make_repairs`` (bugs injected by :mod:`launch.selfplay.mutations`) and
the self-play saboteur (bugs the policy wrote, :mod:`launch.selfplay.saboteur`) decide validity with
:class:`BugJudge` and pose a repair with :func:`repair_prompt`, so a fixer trained on one sees
the other's bugs held to the same rule and their prompts in the same form.

A program is a *valid bug* of a problem when:

- the problem's reference passes every test (run once per problem and kept: without it nothing
  says what a bug is);
- the program is not the reference once normalised (``ast.dump``: formatting and comments
  dropped);
- it loads, every test runs to a verdict, and each test it fails, at least one, fails by a wrong
  value or the test's own assertion (``ExecutionResult.wrong_answers``), not by an exception the
  program raised (its own ``AssertionError`` included, at load or inside the function): a crash
  is no bug a fixer must look for;
- a second run, which the sandbox's result cache cannot answer, fails the same tests: a program
  that fails at random is no bug a fixer can repair.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from common.datasets import DatasetError
from common.types import ExecutionJob, ExecutionResult, Problem, Verdict
from launch.selfplay.mutations import normalised

PROMPT = """{task}

This program is meant to solve the task, but it has a bug:

```python
{buggy}
```

It fails this test:
{test}
The sandbox reported: {report}

Write the corrected program."""

#: Appended to a program for its second run: the sandbox's result cache is keyed by the
#: program's text, and a comment changes the text without changing the program.
RERUN = "\n# run again\n"

#: ``execute(jobs, stop_at_first_failure)``: the sandbox (``SandboxPool.run`` or the fleet's).
Execute = Callable[[list[ExecutionJob], bool], list[ExecutionResult]]


def function_problems_only(problems: Sequence[Problem], source: str) -> None:
    """Repair tasks are written as rows of the generic format (``tests`` statements), which a
    stdin/stdout problem's tests are not: such a source is refused in one line."""
    whole = [p.problem_id for p in problems if p.kind == "stdio"]
    if whole:
        raise DatasetError(
            f"{source}: {len(whole)} of its {len(problems)} problems are stdin/stdout programs "
            f"({whole[0]} first); repair tasks are made from function problems (unit tests)"
        )


def reference_program(problem: Problem) -> str:
    """The reference as a whole program: after the header of a completion-style problem."""
    return problem.program_prefix + problem.reference_solution + problem.program_suffix


def is_wrong_answer(result: ExecutionResult) -> bool:
    """The program loaded, every test ran to a verdict, and every test it failed (at least
    one) failed by a wrong value or the test's own assertion."""
    return (
        result.verdict is Verdict.FAILED
        and len(result.test_verdicts) == result.tests_total
        and result.wrong_answers > 0
        and result.tests_passed + result.wrong_answers == result.tests_total
    )


@dataclass
class BugCheck:
    """Whether one program is a valid bug (``status == "valid"``) or why not: ``infra_error``
    (the sandbox broke: nothing is known), ``reference_fails``, ``same_as_reference``,
    ``still_passes``, ``not_a_wrong_answer`` or ``flaky``. ``result`` is its first full run
    (None when it was not run)."""

    status: str
    result: ExecutionResult | None = None

    @property
    def valid(self) -> bool:
        return self.status == "valid"


def _same_program(a: str, b: str) -> bool:
    try:
        return normalised(a) == normalised(b)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False  # a program that does not parse is not the reference (it fails to load)


def _job(problem: Problem, code: str) -> ExecutionJob:
    return problem.job(code)


class BugJudge:
    """Decides which programs are valid bugs (the rule in the module docstring), keeping each
    problem's reference result (by ``problem_id``) across calls."""

    def __init__(self, execute: Execute) -> None:
        self.execute = execute
        self._references: dict[str, ExecutionResult] = {}

    def references(self, problems: Sequence[Problem]) -> list[ExecutionResult]:
        """Each problem's reference result: run once, every test; an infra error is not kept."""
        missing = {p.problem_id: p for p in problems if p.problem_id not in self._references}
        jobs = [_job(p, reference_program(p)) for p in missing.values()]
        ran = dict(zip(missing, self.execute(jobs, False) if jobs else [], strict=True))
        self._references.update(
            (problem_id, result)
            for problem_id, result in ran.items()
            if result.verdict is not Verdict.INFRA_ERROR
        )
        return [self._references.get(p.problem_id) or ran[p.problem_id] for p in problems]

    def check(self, candidates: Sequence[tuple[Problem, str]]) -> list[BugCheck]:
        """One check per ``(problem, program)``, in order."""
        references = self.references([problem for problem, _ in candidates])
        checks = [
            _before_running(problem, program, reference)
            for (problem, program), reference in zip(candidates, references, strict=True)
        ]
        pending = [k for k, check in enumerate(checks) if check is None]
        first = self.execute([_job(*candidates[k]) for k in pending], False) if pending else []
        for k, result in zip(pending, first, strict=True):
            checks[k] = _after_first_run(result)
        again = [k for k in pending if checks[k].status == "valid"]
        jobs = [_job(candidates[k][0], candidates[k][1] + RERUN) for k in again]
        for k, result in zip(again, self.execute(jobs, False) if jobs else [], strict=True):
            if result.verdict is Verdict.INFRA_ERROR:
                checks[k].status = "infra_error"
            elif (
                not is_wrong_answer(result)
                or result.test_verdicts != checks[k].result.test_verdicts
            ):
                checks[k].status = "flaky"
        return checks


def _before_running(problem: Problem, program: str, reference: ExecutionResult) -> BugCheck | None:
    """What is known without running ``program``; None when it must run."""
    if reference.verdict is Verdict.INFRA_ERROR:
        return BugCheck("infra_error")
    if not reference.passed:
        return BugCheck("reference_fails")
    if _same_program(program, reference_program(problem)):
        return BugCheck("same_as_reference")
    return None


def _after_first_run(result: ExecutionResult) -> BugCheck:
    """The check after one run: ``valid`` here still awaits the second run."""
    if result.verdict is Verdict.INFRA_ERROR:
        return BugCheck("infra_error", result)
    if result.passed:
        return BugCheck("still_passes", result)
    return BugCheck("valid" if is_wrong_answer(result) else "not_a_wrong_answer", result)


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
