"""Exercism-style exercise folders (the Python track): a module to write, judged by the
exercise's ``unittest`` module, each test method one test (docs/datasets.md, Exercise folders).

The test module becomes the problem's setup code, which runs in the tests' own process
(``sandbox/isolated/split.py``), never in the program's: its imports of the solution's module
are taken out and its names left free, so each is a proxy for the program's own. Each test is
``__judge__("Class", "test_method")``, which runs that one method through ``unittest`` there and
raises what it found: an assertion a failure (a wrong answer), anything else an error.
"""

from __future__ import annotations

import ast
from pathlib import Path

from common.rows import DatasetError
from common.types import Problem

INSTRUCTION = (
    "Write the Python module `{module}.py` for this exercise. Reply with the whole module in one "
    "```python block.\n\n{docs}\n\nStart from this stub:\n\n```python\n{stub}\n```\n"
)
# The tests' runner, appended to the test module: one method through unittest's own machinery
# (setUp, tearDown, subTest, skips), its outcome raised again for the harness to record.
JUDGE = """

def __judge__(case, method):
    import unittest
    result = unittest.TestResult()
    globals()[case](method).run(result)
    for _, trace in result.failures:
        raise AssertionError(trace.strip().splitlines()[-1])
    for _, trace in result.errors:
        raise RuntimeError(trace.strip().splitlines()[-1])
"""


def load_exercises(root: Path) -> list[Problem]:
    """Every exercise folder directly under ``root`` (one with a ``.meta/example.py``)."""
    folders = [d for d in sorted(root.iterdir()) if (d / ".meta" / "example.py").is_file()]
    return [load_exercise(folder) for folder in folders]


def is_exercise_tree(root: Path) -> bool:
    return any((d / ".meta" / "example.py").is_file() for d in root.iterdir() if d.is_dir())


def load_exercise(folder: Path) -> Problem:
    module = folder.name.replace("-", "_")
    tests_file = folder / f"{module}_test.py"
    if not tests_file.is_file():
        raise DatasetError(f"{folder}: no test module {tests_file.name}")
    source = tests_file.read_text(encoding="utf-8")
    try:
        setup, cases = read_test_module(source, module)
    except SyntaxError as exc:
        raise DatasetError(f"{tests_file}:{exc.lineno}: does not parse: {exc.msg}") from None
    if not cases:
        raise DatasetError(f"{tests_file}: no test method in a TestCase class")
    docs = "\n\n".join(
        path.read_text(encoding="utf-8").strip()
        for name in ("instructions.md", "instructions.append.md")
        if (path := folder / ".docs" / name).is_file()
    )
    stub_file = folder / f"{module}.py"
    stub = stub_file.read_text(encoding="utf-8").strip() if stub_file.is_file() else ""
    return Problem(
        problem_id=f"exercism/{folder.name}",
        prompt=INSTRUCTION.format(module=module, docs=docs, stub=stub),
        tests=tuple(f"__judge__({case!r}, {method!r})" for case, method in cases),
        setup_code=_helpers(folder, module) + setup + JUDGE,
        reference_solution=(folder / ".meta" / "example.py").read_text(encoding="utf-8"),
        entry_point=f"{module}.py",
    )


def _helpers(folder: Path, module: str) -> str:
    """The folder's other modules the tests import (``test_utils.py``: mock files, sockets),
    made importable in the tests' process before the test module runs."""
    known = {f"{module}.py", f"{module}_test.py"}
    made = []
    for path in sorted(folder.glob("*.py")):
        if path.name not in known:
            source = path.read_text(encoding="utf-8")
            made.append(f"__helper__({path.stem!r}, {source!r})")
    if not made:
        return ""
    return HELPER + "\n".join(made) + "\n\n"


HELPER = """def __helper__(name, source):
    import sys, types
    module = types.ModuleType(name)
    exec(compile(source, name + ".py", "exec"), module.__dict__)
    sys.modules[name] = module

"""


def read_test_module(source: str, module: str) -> tuple[str, list[tuple[str, str]]]:
    """The test module with its imports of ``module`` (anywhere: a ``try`` around one too)
    turned into ``__program__`` look-ups of the program's names, and its tests: (class,
    method) for each ``test*`` method of a class with a base class."""
    tree = _Imports(module).visit(ast.parse(source))
    cases = [
        (node.name, item.name)
        for node in tree.body
        if isinstance(node, ast.ClassDef) and node.bases
        for item in node.body
        if isinstance(item, ast.FunctionDef) and item.name.startswith("test")
    ]
    return ast.unparse(ast.fix_missing_locations(tree)), cases


def _program(target: str, name: str) -> ast.stmt:
    """``target = __program__("name")``: the program's ``name``, asked for once."""
    call = ast.Call(ast.Name("__program__", ast.Load()), [ast.Constant(name)], [])
    return ast.Assign([ast.Name(target, ast.Store())], call)


class _Imports(ast.NodeTransformer):
    """``from acronym import abbreviate as a`` -> ``a = __program__("abbreviate")``;
    ``import hangman`` and ``hangman.Hangman`` -> ``Hangman``, asked for where it is used (a
    name the setup code leaves free is one the tests' process asks the program for)."""

    def __init__(self, module: str) -> None:
        self.module, self.aliases = module, set()

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.AST | list[ast.stmt]:
        if node.module != self.module or node.level:
            return node
        return [_program(a.asname or a.name, a.name) for a in node.names] or ast.Pass()

    def visit_Import(self, node: ast.Import) -> ast.AST:
        self.aliases |= {a.asname or a.name for a in node.names if a.name == self.module}
        rest = [a for a in node.names if a.name != self.module]
        return ast.Import(rest) if rest else ast.Pass()

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        if isinstance(node.value, ast.Name) and node.value.id in self.aliases:
            return ast.copy_location(ast.Name(node.attr, node.ctx), node)
        return self.generic_visit(node)
