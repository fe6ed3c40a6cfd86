"""The layout's rules, checked on the source: no import cycle in ``launch/``, every actor of a
run created in ``launch/fleet/actors.py``, and roles that never import each other."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO_ROOT

#: Benchmark tools (``<role>/bench/``) build their own actors on private clusters; they are not
#: part of a run.
BENCH = "bench"


def _module(path: Path) -> str:
    parts = path.relative_to(REPO_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at module level or inside functions."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def _sources(package: str) -> list[Path]:
    return sorted((REPO_ROOT / package).rglob("*.py"))


def test_launch_has_no_import_cycle():
    graph = {
        _module(p): {m for m in _imports(p) if m.startswith("launch")} for p in _sources("launch")
    }
    cycles = []

    def visit(module: str, path: list[str]) -> None:
        for dependency in graph.get(module, ()):
            if dependency in path:
                cycles.append([*path[path.index(dependency) :], dependency])
            else:
                visit(dependency, [*path, dependency])

    for module in graph:
        visit(module, [module])
    assert not cycles, cycles[0]


def test_every_actor_of_a_run_is_created_in_launch_actors():
    creators = set()
    for package in ("actor", "common", "launch", "learner", "sandbox"):
        for path in _sources(package):
            for node in ast.walk(ast.parse(path.read_text())):
                call = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                if call and node.func.attr == "remote" and ast.unparse(node.func.value) == "ray":
                    creators.add(path.relative_to(REPO_ROOT))
    product = {str(path) for path in creators if BENCH not in path.parts}
    assert product == {"launch/fleet/actors.py"}


def test_roles_import_common_never_each_other():
    roles = ("actor", "learner", "sandbox")
    for role in (*roles, "common"):
        others = [r for r in roles if r != role] + ["launch"]
        for path in _sources(role):
            wrong = {m for m in _imports(path) if m.split(".")[0] in others}
            assert not wrong, f"{path.relative_to(REPO_ROOT)} imports {sorted(wrong)}"
