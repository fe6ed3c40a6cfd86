"""Problem files for the sandbox tools: MBPP and HumanEval rows, JSONL or a JSON array, or a
directory of Kattis problem packages (stdin/stdout).

Parsing lives in :mod:`common.datasets` (the training data loaders use the same code); this
module adapts a parsed :class:`Problem` to what the checker needs. Mistakes in the files are
user errors, reported as ``ProblemFileError`` with the file and line, never as a stack trace.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from common.datasets import DatasetError, load_dataset, parse_rows, read_rows
from common.types import ExecutionJob, Problem, StdioSpec

ProblemFileError = DatasetError  # one exception type for every malformed problems file


@dataclass(frozen=True)
class CheckProblem:
    """A problem as the checker needs it: how to build a job from a completion."""

    task_id: str
    kind: str  # "mbpp", "humaneval" or "stdio" (a whole program: its tests are in ``stdio``)
    reference: str
    tests: tuple[str, ...]
    setup_code: str
    prompt: str = ""
    stdio: StdioSpec | None = None

    def job(self, completion: str) -> ExecutionJob:
        code = self.prompt + completion if self.kind == "humaneval" else completion
        return ExecutionJob(code, self.tests, self.setup_code, self.stdio)

    def reference_job(self) -> ExecutionJob:
        return self.job(self.reference)

    @classmethod
    def from_problem(cls, problem: Problem) -> CheckProblem:
        kind = "humaneval" if problem.program_prefix else "mbpp"
        return cls(
            problem.problem_id,
            "stdio" if problem.stdio is not None else kind,
            problem.reference_solution,
            problem.tests,
            problem.setup_code,
            problem.program_prefix,
            problem.stdio,
        )


def load_problems(path: str | Path) -> dict[str, CheckProblem]:
    """Every row of a problems file (or every package of a directory), by task id; the task
    description is not needed here."""
    if Path(path).is_dir():
        problems = load_dataset(path)
    else:
        problems = parse_rows(read_rows(path), str(path), None, "auto", need_prompt=False)
    return {p.problem_id: CheckProblem.from_problem(p) for p in problems}
