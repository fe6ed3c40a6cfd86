"""Split each test into what the untrusted child computes and what the trusted side judges, in
the strongest of three forms (docs/sandbox.md, "Test forms"): ``compare`` (``assert EXPR ==
EXPECTED``: the child sends EXPR's value, EXPECTED never leaves the front), ``calls`` (any
other single ``assert`` whose candidate names occur only as outermost calls: the child sends
those calls' values, the assertion is evaluated here) and ``exec`` (everything else: run in a
process of its own beside the program's, ``sandbox/isolated/split.py``).
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import importlib
import re
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

VALUE_PREFIX = "__sandbox_v"


@dataclass(frozen=True)
class TestPlan:
    """How one test is executed and judged: ``child`` is the part sent to the untrusted process
    (``{"kind": "value", "exprs": [...]}`` or ``{"kind": "exec", "src": ...}``), ``judge`` a
    compiled trusted expression (None for ``exec``) and ``namespace`` the names it may use."""

    form: str
    child: dict
    judge: Any = None
    namespace: dict = field(default_factory=dict)


@lru_cache(maxsize=256)
def trusted_namespace(setup_code: str) -> dict:
    """Builtins plus the modules imported by the setup code's top-level import statements."""
    namespace: dict = {"__builtins__": builtins}
    try:
        tree = ast.parse(setup_code)
    except (SyntaxError, ValueError):
        return namespace
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            # a failing import is the child's business, not the judge's
            with contextlib.suppress(Exception):
                exec(compile(ast.Module([node], []), "<setup-imports>", "exec"), namespace)
    return namespace


@lru_cache(maxsize=256)
def _definitions(setup_code: str) -> tuple[ast.stmt, ...]:
    try:
        tree = ast.parse(setup_code)
    except (SyntaxError, ValueError):
        return ()
    return tuple(n for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef)))


def shared_classes(setup_code: str) -> tuple[list[str], str]:
    """The plain classes the setup code defines at its top level (no base class: LeetCode's
    ``ListNode``, not a test module's ``TestCase``), by name and as source: their objects
    cross between a split job's two processes by value (``sandbox/wire/remote.py``), so the
    program's process defines them too, before the program."""
    plain = [
        node
        for node in _definitions(setup_code)
        if isinstance(node, ast.ClassDef) and not node.bases and not node.keywords
    ]
    return [node.name for node in plain], "\n\n".join(ast.unparse(node) for node in plain)


@lru_cache(maxsize=4096)
def program_names(setup_code: str, tests: tuple[str, ...]) -> list[str]:
    """What a split job's tests' process asks the program's for (``sandbox/isolated/split.py``):
    the names the setup code and the tests read and bind nowhere themselves (a star import of a
    standard module binds its public names), builtins left out: LeetCode's ``Solution``, not
    the header's ``List``, nor the test methods' ``assertEqual``."""
    read, bound = set(), set(dir(builtins))
    for source in (setup_code, *tests):
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.add(node.name)
            elif isinstance(node, ast.arg):
                bound.add(node.arg)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    star = alias.name == "*" and isinstance(node, ast.ImportFrom)
                    bound |= _public_names(node.module) if star else {_bound_name(alias)}
    return sorted(read - bound)


def _bound_name(alias: ast.alias) -> str:
    return alias.asname or alias.name.partition(".")[0]


def _public_names(module: str | None) -> set[str]:
    """What ``from MODULE import *`` binds, for a standard module (others: nothing known)."""
    if not module or module.partition(".")[0] not in sys.stdlib_module_names:
        return set()
    try:
        loaded = importlib.import_module(module)
    except ImportError:
        return set()
    return set(getattr(loaded, "__all__", None) or [n for n in dir(loaded) if n[:1] != "_"])


def _uses_helpers(tree: ast.AST, setup_code: str) -> bool:
    """Whether the test calls a function or class the setup code defines (``is_same_list``,
    ``list_node``). Such a test runs in its own process: in the program's, the program could
    redefine the helper (``is_same_list = lambda a, b: True``); the front has no helpers."""
    helpers = {node.name for node in _definitions(setup_code)}
    return bool(helpers) and any(
        isinstance(n, ast.Name) and n.id in helpers for n in ast.walk(tree)
    )


def _bound_names(tree: ast.AST) -> set[str]:
    """Names the test binds itself (comprehension targets, lambda arguments, walrus)."""
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return bound


class _Names:
    """Decides which names belong to the candidate and which the trusted side can resolve."""

    def __init__(self, namespace: dict, bound: set[str], shadowed: frozenset[str]) -> None:
        self.namespace = namespace
        self.bound = bound
        self.shadowed = shadowed
        self.modules: dict[str, Any] = {}

    def is_trusted(self, name: str, as_module: bool = False) -> bool:
        if name in self.shadowed:
            return False
        if name.startswith(VALUE_PREFIX) or name in self.bound or name in self.namespace:
            return True
        if hasattr(builtins, name):
            return True
        if as_module and name in sys.stdlib_module_names and not name.startswith("_"):
            try:
                self.modules[name] = importlib.import_module(name)
            except ImportError:
                return False
            return True
        return False

    def candidate_refs(self, tree: ast.AST) -> list[ast.Name]:
        module_bases = {
            id(n.value)
            for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
        }
        return [
            n
            for n in ast.walk(tree)
            if isinstance(n, ast.Name) and not self.is_trusted(n.id, id(n) in module_bases)
        ]


def _rooted_at_candidate(node: ast.AST, names: _Names) -> bool:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return isinstance(node, ast.Name) and not names.is_trusted(node.id, True)


class _CallExtractor(ast.NodeTransformer):
    """Replaces outermost candidate calls with placeholders ``__sandbox_v0``, ``__sandbox_v1``..."""

    def __init__(self, names: _Names) -> None:
        self.names = names
        self.calls: list[str] = []

    def visit_Call(self, node: ast.Call) -> ast.AST:
        if _rooted_at_candidate(node.func, self.names):
            self.calls.append(ast.unparse(node))
            return ast.copy_location(
                ast.Name(f"{VALUE_PREFIX}{len(self.calls) - 1}", ast.Load()), node
            )
        return self.generic_visit(node)


def _exec_plan(test: str) -> TestPlan:
    return TestPlan("exec", {"kind": "exec", "src": test})


def _compile_judge(expr: ast.expr) -> Any:
    return compile(ast.fix_missing_locations(ast.Expression(expr)), "<judge>", "eval")


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# The names a program binds, as the shadowing check reads them: the word after ``def``,
# ``class``, ``import`` or ``as`` (``_DEFINED``), and a line's first word when ``=`` follows it
# (``_ASSIGNED``). The program is untrusted and the front scans it while every worker waits, so
# each scan is linear in its length: a pattern starts with a literal (``d(?<!\wd)`` is ``\bd``,
# written to start with one), each run of whitespace is scanned from one place only, and
# lookaheads consume nothing, so no binding hides another. They find what
# ``(\bdef|\bclass|\bimport|\bas)\s+NAME\b|^\s*NAME\s*=`` (re.M, quadratic in blank lines) finds
# (``tests/unit/sandbox/test_trusted_bounds.py`` compares the two).
_DEFINED = re.compile(r"(?:d(?<!\wd)ef|c(?<!\wc)lass|i(?<!\wi)mport|a(?<!\wa)s)(?=\s+(\w+))")
_ASSIGNED = re.compile(r"\n(?=[^\S\n]*(\w+)\s*=)")


def shadowed_names(code: str, tests: tuple[str, ...]) -> frozenset[str]:
    """Builtin or module names used by the tests that the program redefines (MBPP task 126
    defines its own ``sum``): those belong to the candidate, as in Python. Linear in the
    program's length (see ``_DEFINED``), and no scan when the tests use no such name. Matches
    are read one at a time: ``findall`` would hold a string for each."""
    used = {m.group() for test in tests for m in _IDENTIFIER.finditer(test)}
    common = {n for n in used if hasattr(builtins, n) or n in sys.stdlib_module_names}
    if not common:
        return frozenset()
    text = "\n" + code
    return frozenset(
        m.group(1)
        for pattern in (_DEFINED, _ASSIGNED)
        for m in pattern.finditer(text)
        if m.group(1) in common
    )


@lru_cache(maxsize=65536)
def plan_test(test: str, setup_code: str = "", shadowed: frozenset[str] = frozenset()) -> TestPlan:
    """Choose the strongest form for one test (cached: a group shares its problem's tests)."""
    try:
        tree = ast.parse(test)
    except (SyntaxError, ValueError):
        return _exec_plan(test)
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assert):
        return _exec_plan(test)
    if _uses_helpers(tree, setup_code):
        return _exec_plan(test)
    expr = tree.body[0].test
    names = _Names(trusted_namespace(setup_code), _bound_names(tree), shadowed)
    compare = _compare_plan(expr, names)
    if compare is not None:
        return compare
    if names.bound:
        return _exec_plan(test)
    extractor = _CallExtractor(names)
    judged = extractor.visit(expr)
    if names.candidate_refs(judged):
        return _exec_plan(test)
    calls = extractor.calls
    if _is_truth_test(expr, judged):  # only truthiness matters, and `return True` passes anyway
        calls = [f"(not not ({calls[0]}))"]
    namespace = {**names.namespace, **names.modules}
    return TestPlan("calls", {"kind": "value", "exprs": calls}, _compile_judge(judged), namespace)


def _is_truth_test(expr: ast.expr, judged: ast.expr) -> bool:
    """``assert f(x)`` / ``assert not f(x)``: the value may be any object (a ``re.Match``)."""
    if isinstance(judged, ast.UnaryOp) and isinstance(judged.op, ast.Not):
        judged = judged.operand
    return isinstance(judged, ast.Name) and judged.id == f"{VALUE_PREFIX}0"


def _compare_plan(expr: ast.expr, names: _Names) -> TestPlan | None:
    if not (
        isinstance(expr, ast.Compare) and len(expr.ops) == 1 and isinstance(expr.ops[0], ast.Eq)
    ):
        return None
    left, right = expr.left, expr.comparators[0]
    if names.candidate_refs(right) or not names.candidate_refs(left):
        left, right = right, left
        if names.candidate_refs(right) or not names.candidate_refs(left):
            return None
    judged = ast.Compare(ast.Name(f"{VALUE_PREFIX}0", ast.Load()), [ast.Eq()], [right])
    namespace = {**names.namespace, **names.modules}
    child = {"kind": "value", "exprs": [ast.unparse(left)]}
    return TestPlan("compare", child, _compile_judge(judged), namespace)


def judge(plan: TestPlan, values: list[Any]) -> bool:
    """Evaluate the trusted assertion with the child's (rebuilt) values substituted."""
    scope = dict(plan.namespace)
    scope.update({f"{VALUE_PREFIX}{i}": v for i, v in enumerate(values)})
    return bool(eval(plan.judge, scope))
