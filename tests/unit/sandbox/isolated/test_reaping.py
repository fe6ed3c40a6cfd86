"""What an execution leaves behind: nothing. Every process it started, ``setsid`` or deeper
in the tree, is killed after it, with a PID namespace and without one, and when its zygote
dies."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time

import psutil
import pytest

from common.config import SandboxConfig
from common.types import ExecutionJob, Verdict
from sandbox.trusted.pool import SandboxPool
from tests.conftest import REPO_ROOT
from tests.unit.sandbox.helpers import F_TESTS, GOOD_F, run, shared_pool


@pytest.fixture(scope="module", params=["auto", "python"], ids=["c_loop", "python_loop"])
def pool(request):
    with shared_pool(request.param) as shared:
        yield shared


def _grandchild_program(marker: str, parent_stays: bool = False) -> str:
    """A program that leaves a ``setsid`` grandchild running ``sleep 300`` (``marker`` in its
    command line) and passes the tests only if that grandchild's exec succeeded: a passing
    run proves the process existed, so "no survivors" afterwards means it was killed. With
    ``parent_stays`` the grandchild's parent becomes such a sleeper too, instead of exiting:
    then the grandchild is not re-parented to the zygote before the sweep starts.
    """
    return textwrap.dedent(
        f"""
        import os
        r, w = os.pipe()  # close-on-exec: end of file once every sleeper's exec succeeded
        def sleeper():
            try:
                os.execv("/bin/sleep", [{marker!r}, "300"])
            finally:
                os.write(w, b"x")
                os._exit(1)
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                sleeper()
            if {parent_stays!r}:
                sleeper()
            os._exit(0)
        os.close(w)
        started = os.read(r, 1) == b""
        def f(x):
            return x + 1 if started else None
        """
    )


def _processes_with(marker: str) -> list[psutil.Process]:
    """Live (not zombie) processes whose command line contains ``marker``."""
    return [
        process
        for process in psutil.process_iter(["cmdline", "status"])
        if marker in " ".join(process.info["cmdline"] or [])
        and process.info["status"] != psutil.STATUS_ZOMBIE
    ]


@pytest.mark.parametrize("parent_stays", [False, True])
def test_setsid_grandchild_is_killed(pool, parent_stays):
    marker = f"sandbox-grandchild-{os.getpid()}-{time.time_ns()}"
    assert run(pool, _grandchild_program(marker, parent_stays)).passed  # the sleepers ran
    assert _left_after_kill(marker) == []


def test_zygote_is_namespace_init_and_keeps_no_processes(pool):
    code = "import os\nif os.fork() == 0:\n    os.setsid()\n    os.fork()\n" + GOOD_F
    run(pool, code)
    for worker in pool._workers:
        zygotes = psutil.Process(worker.proc.pid).children()
        assert len(zygotes) == 1
        with open(f"/proc/{zygotes[0].pid}/status") as fh:
            status = fh.read()
        nspids = status.split("NSpid:")[1].splitlines()[0].split()
        assert nspids[-1] == "1"  # PID 1 of its own namespace
        assert zygotes[0].children() == []


def test_without_namespaces_setsid_grandchildren_are_still_killed():
    config = SandboxConfig(
        num_workers=1, timeout_s=3.0, test_timeout_s=1.0, cache=False, min_isolation="rlimits"
    )
    marker = f"sandbox-unisolated-{os.getpid()}-{time.time_ns()}"
    with SandboxPool(config, isolation_mode="none") as bare:
        assert bare.isolation == "rlimits-only" and not bare.own_proc
        for parent_stays in (False, True):  # True: killed level by level through the zygote
            assert run(bare, _grandchild_program(marker, parent_stays)).passed  # they ran
            assert _left_after_kill(marker) == []
        assert run(bare, "def f(x):\n    while True: pass\n").verdict is Verdict.TIMEOUT


_KILL_CHAIN = """
import os, sys
sys.path.insert(0, {root!r})
from sandbox.isolated import reaping, syscalls
syscalls.prctl(syscalls.PR_SET_CHILD_SUBREAPER, 1)  # as the zygote without namespaces
if {scan!r}:  # a kernel without /proc/<pid>/task/<tid>/children
    def open_without_children_file(path, *args, **kwargs):
        if str(path).endswith("/children"):
            raise FileNotFoundError(path)
        return open(path, *args, **kwargs)
    reaping.open = open_without_children_file
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    quiet = os.open(os.devnull, os.O_WRONLY)
    os.dup2(quiet, 1)  # a survivor must not hold our stdout open: the test reads it to its end
    os.dup2(quiet, 2)
    if os.fork() == 0:
        os.execv("/bin/sleep", [{marker!r}, "300"])
    os.execv("/bin/sleep", [{marker!r}, "301"])
os.close(w)
assert os.read(r, 1) == b""  # both sleepers exec'd (close-on-exec)
print(reaping.kill_descendants(os.getpid()))
"""


@pytest.mark.parametrize("scan", [False, True])
def test_kill_descendants_reaches_a_grandchild_whose_parent_lives(scan):
    """Without a PID namespace the zygote kills its children level by level (the killed
    ones' children are re-parented to it), found in one small /proc file or, on a kernel
    without it, a scan of /proc."""
    marker = f"sandbox-chain-{scan}-{os.getpid()}-{time.time_ns()}"
    script = _KILL_CHAIN.format(root=str(REPO_ROOT), scan=scan, marker=marker)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2"]  # the sleeping child and the grandchild under it
    assert _processes_with(marker) == []


def _left_after_kill(marker: str, timeout_s: float = 10.0) -> list[psutil.Process]:
    """The processes with ``marker`` still alive once the kill has had ``timeout_s`` to land
    (the zygote's SIGKILLs are asynchronous to the call that returned): polled, so a slow
    machine waits longer rather than failing, and a process that survives fails."""
    deadline = time.monotonic() + timeout_s
    while (left := _processes_with(marker)) and time.monotonic() < deadline:
        time.sleep(0.02)
    return left


def _wait_for_process_with(marker: str, timeout_s: float = 10.0) -> psutil.Process:
    deadline = time.monotonic() + timeout_s
    while not (found := _processes_with(marker)):
        assert time.monotonic() < deadline, f"no process with {marker} started"
        time.sleep(0.02)
    return found[0]


def _gone(process: psutil.Process, timeout_s: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.02)
    return False


@pytest.mark.parametrize("isolation_mode", ["auto", "none"])
def test_an_execution_dies_with_its_zygote(isolation_mode):
    """As a PID namespace's init, the zygote takes every process of the namespace down with
    it (the kernel's rule, so children set no parent-death signal then); without namespaces
    each child has SIGKILL as its parent-death signal."""
    config = SandboxConfig(
        num_workers=1, timeout_s=2.0, test_timeout_s=2.0, cache=False, min_isolation="rlimits"
    )
    marker = f"sandbox-orphan-{isolation_mode}-{os.getpid()}-{time.time_ns()}"
    job = ExecutionJob(f"import os\nos.execv('/bin/sleep', [{marker!r}, '300'])\n", F_TESTS)
    with SandboxPool(config, isolation_mode=isolation_mode) as solo:
        runner = threading.Thread(target=solo.run, args=([job],))
        runner.start()
        try:
            sleeper = _wait_for_process_with(marker)
            psutil.Process(solo._workers[0].proc.pid).children()[0].kill()  # the zygote
            assert _gone(sleeper)
        finally:
            runner.join()  # the retried job runs into its timeout
        assert run(solo, GOOD_F).passed
    assert _processes_with(marker) == []
