"""One row's fields, as every format's parser reads them (``common.datasets``,
``common.leetcode``): a malformed row is a :class:`DatasetError` naming its file and line."""

from __future__ import annotations

import ast


class DatasetError(ValueError):
    """A malformed or unavailable problem set; the message names the file and line (or row)."""


def require_fields(row: dict, fields: tuple[str, ...], where: str) -> None:
    missing = [f for f in fields if f not in row]
    if missing:
        raise DatasetError(f"{where}: missing field(s) {', '.join(missing)}")


def test_list(row: dict, field: str, where: str) -> tuple[str, ...]:
    """``field``'s tests, each Python that parses: a test with a syntax error would fail every
    completion, a problem nothing can solve, found only by its zero rewards."""
    tests = row[field]
    if not isinstance(tests, list) or not all(isinstance(t, str) for t in tests):
        raise DatasetError(f"{where}: {field} must be a list of strings")
    for number, test in enumerate(tests):
        try:
            ast.parse(test)
        except SyntaxError as exc:
            raise DatasetError(f"{where}: {field}[{number}] does not parse: {exc.msg}") from None
    return tuple(tests)


def row_string(row: dict, field: str, where: str) -> str:
    value = row.get(field)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise DatasetError(f"{where}: {field} must be a string")
    return value


def humaneval_tests(test_code: str, entry_point: str, where: str = "test") -> tuple[str, ...]:
    """Rewrite HumanEval's ``check(candidate)`` into top-level tests on ``entry_point``.

    Each assert becomes one test, so the sandbox can judge (and give partial credit for) each
    one; statements before an assert (setup lines) are kept with it, which makes that test an
    ``exec``-form test. Module-level imports are prepended to every multi-statement test.
    """
    try:
        tree = ast.parse(test_code)
    except SyntaxError as exc:
        raise DatasetError(f"{where}: test code does not parse: {exc.msg}") from None
    check = next(
        (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"), None
    )
    if check is None or not check.args.args:
        raise DatasetError(f"{where}: test code has no check(candidate) function")
    parameter = check.args.args[0].arg
    preamble = [ast.unparse(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    tests, pending = [], []
    for statement in check.body:
        pending.append(_rename(statement, parameter, entry_point))
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
