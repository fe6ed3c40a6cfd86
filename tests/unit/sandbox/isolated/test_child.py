"""The worker server's side of a job (``sandbox/isolated/child.py``): it compiles the program, its
setup and tests as Python would, and what does not compile travels as text or as the record
the child would send."""

from __future__ import annotations
import __future__

import types

from sandbox.isolated import child


def test_server_compiles_program_setup_and_tests_as_python_would():
    parts = [{"kind": "value", "exprs": ["f(1)"]}, {"kind": "exec", "src": "assert f(2) == 3"}]
    job = child.precompiled("def f(x: int):\n    return x + 1\n", "y = 2", parts)
    assert "load_error" not in job
    codes = [job["code"], job["setup_code"], job["parts"][0]["exprs"][0], job["parts"][1]["src"]]
    assert all(isinstance(code, types.CodeType) for code in codes)
    # compiled without this harness's own `from __future__ import annotations`
    assert not job["code"].co_flags & __future__.annotations.compiler_flag
    namespace: dict = {"__builtins__": __builtins__}
    exec(job["code"], namespace)
    assert namespace["f"].__annotations__ == {"x": int}


def test_server_reports_a_program_that_does_not_compile_as_its_child_would():
    code = "def f(x) return x"
    job = child.precompiled(code, "", [])
    assert job["load_error"] == child._load(code, "", {})  # the record the child would send
    assert job["load_error"]["kind"] == "syntax"


def test_large_programs_and_tests_that_do_not_compile_travel_as_text():
    big = "#" * child.SERVER_COMPILE_MAX + "\ndef f(x) return x"
    job = child.precompiled(big, "", [{"kind": "exec", "src": "assert ("}])
    assert job["code"] == big and "load_error" not in job  # the child compiles and reports
    assert job["parts"][0]["src"] == "assert ("
