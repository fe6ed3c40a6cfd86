"""The sandbox's trust boundary, checked on the source and in a fresh worker interpreter.

``sandbox/isolated/`` runs in the locked-down worker processes, beside untrusted code, and
every module it loads is mapped into the zygote, whose pages every fork copies: it imports the
standard library, itself and ``sandbox/wire/`` only, never the trusted front, ``common`` or a
third-party package. ``sandbox/wire/`` is shared by both sides and imports the standard
library only.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT

SANDBOX = REPO_ROOT / "sandbox"


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def _outside(package: str, allowed: tuple[str, ...]) -> dict[str, set[str]]:
    """Per file of ``sandbox/<package>/``: what it imports beyond the standard library and the
    ``allowed`` packages."""
    found = {}
    for path in sorted((SANDBOX / package).rglob("*.py")):
        wrong = {
            name
            for name in _imports(path)
            if name.split(".")[0] not in sys.stdlib_module_names
            and not any(name == a or name.startswith(a + ".") for a in allowed)
        }
        if wrong:
            found[str(path.relative_to(REPO_ROOT))] = wrong
    return found


def test_the_isolated_side_imports_only_the_stdlib_itself_and_the_wire_format():
    assert _outside("isolated", ("sandbox.isolated", "sandbox.wire")) == {}


def test_the_wire_format_imports_only_the_stdlib_and_itself():
    assert _outside("wire", ("sandbox.wire",)) == {}


def test_a_worker_interpreter_loads_no_trusted_module_and_no_threading():
    """What the pool's front starts (``python -I``, the server's module) loads nothing of the
    front, of ``common`` or of a third-party package, and not ``threading``, whose after-fork
    hook alone costs every child a hundred-odd page faults. What the interpreter loads at
    start-up (``site``, the venv's ``.pth`` hooks) is not the server's doing."""
    script = (
        f"import sys; sys.path.insert(0, {str(REPO_ROOT)!r}); started = set(sys.modules); "
        "import sandbox.isolated.server; print(' '.join(sorted(set(sys.modules) - started))); "
        "print('threading' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-c", script], capture_output=True, text=True, check=True
    )
    new, threading = done.stdout.splitlines()
    loaded = set(new.split())
    assert "sandbox.isolated.server" in loaded
    ours = {m for m in loaded if m.split(".")[0] not in sys.stdlib_module_names}
    assert {m for m in ours if not m.startswith(("sandbox.isolated", "sandbox.wire"))} == {
        "sandbox"
    }
    assert threading == "False"
