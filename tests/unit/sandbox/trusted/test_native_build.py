"""The zygote's C loop is built on first use, cached per source and interpreter, and where it
cannot be built the pool says why and serves with the Python loop."""

from __future__ import annotations

import os

from common.types import Verdict
from sandbox.trusted import native_build
from sandbox.trusted.pool import SandboxPool
from tests.unit.sandbox.helpers import CONFIG, GOOD_F, run


def test_built_once_then_taken_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path, why = native_build.build()
    assert path is not None, why
    assert os.path.dirname(path) == str(tmp_path / "grpo-code")
    built_at = os.stat(path).st_mtime_ns
    monkeypatch.setenv("CC", "false")  # a second build would fail: the cached one is used
    assert native_build.build() == (path, "")
    assert os.stat(path).st_mtime_ns == built_at
    assert os.listdir(tmp_path / "grpo-code") == [os.path.basename(path)]  # no partial left


def test_another_source_is_another_library(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    changed = tmp_path / "_zygote.c"
    changed.write_text(native_build.SOURCE.read_text() + "/* another version */\n")
    first, second = native_build.build()[0], native_build.build(changed)[0]
    assert first and second and first != second


def test_without_a_compiler_the_pool_says_why_and_serves(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("CC", "false")
    path, why = native_build.build()
    assert path is None and why.startswith("false failed")
    with SandboxPool(CONFIG) as pool:
        assert pool.zygote_loop == f"zygote loop in Python in 2 workers ({why})"
        assert run(pool, GOOD_F).verdict is Verdict.PASSED
        assert run(pool, "while True: pass").verdict is Verdict.TIMEOUT
    assert os.listdir(tmp_path / "grpo-code") == []  # the failed build left nothing


def test_a_library_that_does_not_load_leaves_the_python_loop(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path, why = native_build.build()
    assert path is not None, why
    with open(path, "wb") as library:  # as if another machine's build were in a shared home
        library.write(b"not an ELF file")
    with SandboxPool(CONFIG) as pool:
        assert pool.zygote_loop.startswith("zygote loop in Python in 2 workers (could not load ")
        assert run(pool, GOOD_F).verdict is Verdict.PASSED


def test_compiler_is_cc_where_the_interpreters_own_is_missing(monkeypatch):
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setattr(
        native_build.sysconfig, "get_config_var", lambda name: "no-such-cc -pthread"
    )
    assert native_build.compiler() == ["cc"]
    monkeypatch.setenv("CC", "gcc -O1")
    assert native_build.compiler() == ["gcc", "-O1"]
