"""Problem files for the sandbox tools: MBPP and HumanEval rows, JSONL or a JSON array.

Mistakes in the files are user errors, reported as ``ProblemFileError`` with the file and
line, never as a stack trace.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from pathlib import Path

from common.types import ExecutionJob


class ProblemFileError(ValueError):
    """A malformed problems or samples file; the message names the file and line."""


@dataclass(frozen=True)
class CheckProblem:
    """A problem as the checker needs it: how to build a job from a completion."""

    task_id: str
    kind: str  # "mbpp" or "humaneval"
    reference: str
    tests: tuple[str, ...]
    setup_code: str
    prompt: str = ""

    def job(self, completion: str) -> ExecutionJob:
        code = self.prompt + completion if self.kind == "humaneval" else completion
        return ExecutionJob(code=code, tests=self.tests, setup_code=self.setup_code)

    def reference_job(self) -> ExecutionJob:
        return self.job(self.reference)


def read_rows(path: str | Path) -> list[tuple[int, dict]]:
    """Rows with their line numbers, from JSONL or from one JSON array."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ProblemFileError(f"{path}: cannot read: {exc}") from None
    if text.lstrip().startswith("["):
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ProblemFileError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
        numbered = [(i + 1, row) for i, row in enumerate(rows)]
    else:
        numbered = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                numbered.append((number, json.loads(line)))
            except json.JSONDecodeError as exc:
                raise ProblemFileError(f"{path}:{number}: not valid JSON: {exc.msg}") from None
    for number, row in numbered:
        if not isinstance(row, dict):
            raise ProblemFileError(f"{path}:{number}: expected a JSON object")
    return numbered


def _require(row: dict, fields: tuple[str, ...], where: str) -> None:
    missing = [f for f in fields if f not in row]
    if missing:
        raise ProblemFileError(f"{where}: missing field(s) {', '.join(missing)}")


def parse_problem(row: dict, where: str) -> CheckProblem:
    """Detect the row's format (HumanEval has ``entry_point``) and build a ``CheckProblem``."""
    if "entry_point" in row:
        _require(row, ("task_id", "prompt", "canonical_solution", "test", "entry_point"), where)
        tests = humaneval_tests(row["test"], row["entry_point"], where)
        return CheckProblem(
            str(row["task_id"]), "humaneval", row["canonical_solution"], tests, "", row["prompt"]
        )
    _require(row, ("task_id", "code", "test_list"), where)
    if not isinstance(row["test_list"], list) or not all(
        isinstance(t, str) for t in row["test_list"]
    ):
        raise ProblemFileError(f"{where}: test_list must be a list of strings")
    imports = row.get("test_imports") or []
    setup = "\n".join([*imports, row.get("test_setup_code") or ""]).strip()
    return CheckProblem(str(row["task_id"]), "mbpp", row["code"], tuple(row["test_list"]), setup)


def humaneval_tests(test_code: str, entry_point: str, where: str = "test") -> tuple[str, ...]:
    """Rewrite HumanEval's ``check(candidate)`` into top-level tests on ``entry_point``.

    Each assert becomes one test; statements before an assert (setup lines) are kept with
    it, which makes that test an ``exec``-form test. Module-level lines (imports, METADATA)
    are prepended to every test that needs more than one statement.
    """
    try:
        tree = ast.parse(test_code)
    except SyntaxError as exc:
        raise ProblemFileError(f"{where}: test code does not parse: {exc.msg}") from None
    check = next(
        (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"), None
    )
    if check is None or not check.args.args:
        raise ProblemFileError(f"{where}: test code has no check(candidate) function")
    parameter = check.args.args[0].arg
    preamble = [ast.unparse(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    tests, pending = [], []
    for statement in check.body:
        renamed = _rename(statement, parameter, entry_point)
        pending.append(renamed)
        if isinstance(statement, ast.Assert):
            tests.append("\n".join(pending if len(pending) == 1 else [*preamble, *pending]))
            pending = []
    if pending:
        tests.append("\n".join([*preamble, *pending]))
    return tuple(tests)


def _rename(statement: ast.stmt, old: str, new: str) -> str:
    class Renamer(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.Name:
            return ast.Name(new, node.ctx) if node.id == old else node

    return ast.unparse(Renamer().visit(statement))


def load_problems(path: str | Path) -> dict[str, CheckProblem]:
    problems: dict[str, CheckProblem] = {}
    for number, row in read_rows(path):
        problem = parse_problem(row, f"{path}:{number}")
        problems[problem.task_id] = problem
    return problems
