"""Bugs injected into correct programs by AST mutation: the raw material of repair tasks.

Each operator names the kind of mistake programmers make, finds every place in a program where
it applies (its *sites*, in a fixed walk order) and rewrites one of them:

- ``compare_swap``: a comparison operator for its neighbour (``<`` / ``<=``, ``==`` / ``!=``);
- ``arith_swap``: an arithmetic operator for another (``+`` / ``-``, ``*`` -> ``+``, ...);
- ``off_by_one``: ``range`` bounds and subscript indices moved by one;
- ``wrong_variable``: a variable read replaced by another variable of the same function;
- ``drop_statement``: a statement removed from a block that keeps at least one;
- ``swap_arguments``: the first two positional arguments of a call exchanged;
- ``wrong_constant``: an integer literal moved by one;
- ``negate_condition``: an ``if``/``while``/ternary condition negated.

A mutant is only a candidate: whether it is a *bug* (it compiles, and the sandbox sees it fail a
test the original passes) is decided by ``launch.selfplay.make_repairs``.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator

_COMPARE = {
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
    ast.In: ast.NotIn, ast.NotIn: ast.In,
}  # fmt: skip
_ARITH = {
    ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Add, ast.FloorDiv: ast.Mult,
    ast.Div: ast.Mult, ast.Mod: ast.FloorDiv, ast.Pow: ast.Mult,
}  # fmt: skip


def _compare_sites(tree: ast.AST) -> Iterator[tuple[ast.AST, int]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                if type(op) in _COMPARE:
                    yield node, i


def _compare_apply(site: tuple[ast.AST, int]) -> None:
    node, i = site
    node.ops[i] = _COMPARE[type(node.ops[i])]()


def _arith_sites(tree: ast.AST) -> Iterator[ast.AST]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) in _ARITH:
            yield node


def _arith_apply(node) -> None:
    node.op = _ARITH[type(node.op)]()


#: Subscript indices worth moving by one (not slices, not tuples of a mapping's keys).
_INDEX = (ast.Name, ast.Constant, ast.BinOp, ast.UnaryOp)


def _index_expressions(tree: ast.AST) -> Iterator[tuple[ast.AST, str, int | None]]:
    """(parent, field, position) of every range bound and subscript index."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id == "range" and 1 <= len(node.args) <= 2:
                for i in range(len(node.args)):
                    yield node, "args", i
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, _INDEX):
            yield node, "slice", None


def _off_by_one_sites(tree: ast.AST) -> Iterator[tuple[ast.AST, str, int | None, int]]:
    for parent, field, position in _index_expressions(tree):
        for delta in (1, -1):
            yield parent, field, position, delta


def _off_by_one_apply(site) -> None:
    parent, field, position, delta = site
    value = getattr(parent, field) if position is None else getattr(parent, field)[position]
    op = ast.Add() if delta > 0 else ast.Sub()
    moved = ast.BinOp(left=value, op=op, right=ast.Constant(1))
    if position is None:
        setattr(parent, field, moved)
    else:
        getattr(parent, field)[position] = moved


def _functions(tree: ast.AST) -> list[ast.AST]:
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _wrong_variable_sites(tree: ast.AST) -> Iterator[tuple[ast.Name, str]]:
    for function in _functions(tree):
        names = sorted(
            {a.arg for a in function.args.args}
            | {
                n.id
                for n in ast.walk(function)
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
            }
        )
        for node in ast.walk(function):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in names:
                for other in names:
                    if other != node.id:
                        yield node, other


def _wrong_variable_apply(site) -> None:
    node, other = site
    node.id = other


def _drop_statement_sites(tree: ast.AST) -> Iterator[tuple[list, int]]:
    for node in ast.walk(tree):
        for field in ("body", "orelse"):
            block = getattr(node, field, None)
            if isinstance(block, list) and len(block) >= 2:
                for i, statement in enumerate(block):
                    if not isinstance(statement, (ast.FunctionDef, ast.ClassDef, ast.Import,
                                                  ast.ImportFrom)):  # fmt: skip
                        yield block, i


def _drop_statement_apply(site) -> None:
    block, i = site
    del block[i]


def _swap_arguments_sites(tree: ast.AST) -> Iterator[ast.Call]:
    for node in ast.walk(tree):
        plain = isinstance(node, ast.Call) and len(node.args) >= 2
        if plain and not any(isinstance(a, ast.Starred) for a in node.args[:2]):
            yield node


def _swap_arguments_apply(node) -> None:
    node.args[0], node.args[1] = node.args[1], node.args[0]


def _wrong_constant_sites(tree: ast.AST) -> Iterator[ast.Constant]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and type(node.value) is int:
            yield node


def _wrong_constant_apply(node) -> None:
    node.value = node.value + 1


def _negate_sites(tree: ast.AST) -> Iterator[ast.AST]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.If, ast.While, ast.IfExp)):
            yield node


def _negate_apply(node) -> None:
    node.test = ast.UnaryOp(op=ast.Not(), operand=node.test)


Sites = Callable[[ast.AST], Iterator]
Apply = Callable[[object], None]

#: name -> (sites of a tree, rewrite one site in place)
OPERATORS: dict[str, tuple[Sites, Apply]] = {
    "compare_swap": (_compare_sites, _compare_apply),
    "arith_swap": (_arith_sites, _arith_apply),
    "off_by_one": (_off_by_one_sites, _off_by_one_apply),
    "wrong_variable": (_wrong_variable_sites, _wrong_variable_apply),
    "drop_statement": (_drop_statement_sites, _drop_statement_apply),
    "swap_arguments": (_swap_arguments_sites, _swap_arguments_apply),
    "wrong_constant": (_wrong_constant_sites, _wrong_constant_apply),
    "negate_condition": (_negate_sites, _negate_apply),
}


def count_sites(source: str, operator: str) -> int:
    """How many places of ``source`` ``operator`` can rewrite."""
    sites, _ = OPERATORS[operator]
    return sum(1 for _ in sites(ast.parse(source)))


def mutate(source: str, operator: str, site: int) -> str:
    """``source`` with ``operator`` applied at its ``site``-th site (0-based), unparsed."""
    tree = ast.parse(source)
    sites, apply = OPERATORS[operator]
    for i, found in enumerate(sites(tree)):
        if i == site:
            apply(found)
            return ast.unparse(ast.fix_missing_locations(tree))
    raise IndexError(f"{operator} has no site {site} in this program")


def normalised(source: str) -> str:
    """The program's AST without formatting or comments: equal for the same program."""
    return ast.dump(ast.parse(source), annotate_fields=False)
