"""What a program cannot reach from inside the pool: the host's files, processes, network and
environment, and the workers that run it."""

from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path

import pytest

from common.types import Verdict
from sandbox.wire.levels import LEVEL_FULL
from tests.conftest import REPO_ROOT
from tests.unit.sandbox.helpers import GOOD_F, run


def test_isolation_is_probed_and_reported(pool):
    assert pool.isolation == LEVEL_FULL
    assert pool.stats()["sandbox/isolation_level"] == 2.0
    line = pool.describe()  # what launch.train logs
    assert line.startswith(f"2 workers, isolation {LEVEL_FULL}+{pool.memory_layer}; ")
    assert pool.pinning in line and line.endswith(pool.zygote_loop)


def test_writing_outside_scratch_fails(pool):
    path = f"/tmp/sandbox-escape-{os.getpid()}"
    result = run(pool, f"open({path!r}, 'w').write('x')\n" + GOOD_F)
    assert result.verdict is Verdict.RUNTIME_ERROR and not os.path.exists(path)


def test_deleting_host_files_fails(pool):
    with tempfile.NamedTemporaryFile(dir="/tmp", delete=False) as fh:
        fh.write(b"precious")
    try:
        os.chmod(fh.name, 0o666)
        result = run(pool, f"import os\nos.remove({fh.name!r})\n" + GOOD_F)
        assert result.verdict is Verdict.RUNTIME_ERROR
        with open(fh.name, "rb") as check:
            assert check.read() == b"precious"
    finally:
        os.unlink(fh.name)


def test_host_processes_are_not_visible_in_proc(pool):
    # The host's /proc would list every process of the machine, command lines included.
    assert pool.own_proc
    code = (
        "import os\n"
        "def f(x):\n"
        "    return sorted(int(e) for e in os.listdir('/proc') if e.isdigit())"
        " == [1, os.getpid()]\n"
    )
    assert run(pool, code, tests=("assert f(0) == True",)).passed


def _checkout() -> str:
    """The checkout's tests directory, or where an ordinary user running this suite keeps
    its checkouts and datasets (its home) when it may not write to this one."""
    tests = REPO_ROOT / "tests"
    return str(tests if os.access(tests, os.W_OK) else Path.home())


@pytest.mark.parametrize(
    "where",
    [
        lambda: "/tmp",  # another job's temporary files
        _checkout,  # a checkout (datasets)
    ],
    ids=["tmp", "checkout"],
)
def test_host_files_are_not_even_readable(pool, where):
    # A world-readable file the program knows the path of, e.g. a dataset with the reference
    # answers: outside the interpreter's and the sandbox's own directories it does not exist.
    with tempfile.NamedTemporaryFile(dir=where(), prefix="answers-", delete=False) as fh:
        fh.write(b"def f(x):\n    return x + 1\n")
    try:
        os.chmod(fh.name, 0o644)
        code = f"exec(open({fh.name!r}).read())\n"
        assert run(pool, code).verdict is Verdict.RUNTIME_ERROR
        probe = f"import os\nassert not os.path.exists({fh.name!r})\n" + GOOD_F
        assert run(pool, probe).verdict is Verdict.PASSED  # the file is not there at all
    finally:
        os.unlink(fh.name)


def test_interpreter_and_system_files_stay_readable(pool):
    code = """
        import os, sys, json, decimal
        assert os.path.isfile(os.__file__) and os.path.isdir(sys.base_prefix)
        open("/etc/hostname" if os.path.exists("/etc/hostname") else os.__file__).read()
        def f(x):
            return x + 1
    """
    assert run(pool, code).verdict is Verdict.PASSED


def test_loopback_connection_never_arrives(pool):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.5)
    port = server.getsockname()[1]
    code = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=0.5)\n" + GOOD_F
    try:
        assert run(pool, code).verdict is Verdict.RUNTIME_ERROR
        with pytest.raises(OSError):
            server.accept()
    finally:
        server.close()


def test_killing_the_parent_does_not_break_the_pool(pool):
    code = "import os\nos.kill(os.getppid(), 9)\nos.kill(1, 9)\n" + GOOD_F
    assert run(pool, code).verdict is not Verdict.INFRA_ERROR
    assert run(pool, GOOD_F).passed


def test_environment_secrets_are_not_visible(pool, monkeypatch):
    monkeypatch.setenv("SANDBOX_TEST_SECRET", "hunter2")
    code = "import os\ndef f(x):\n"
    code += "    return len(os.environ) + (os.getenv('SANDBOX_TEST_SECRET') is not None)\n"
    assert run(pool, code, ("assert f(1) == 0",)).passed
