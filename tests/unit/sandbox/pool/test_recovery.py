"""Failure and restart: a worker that dies mid-job is replaced without losing a job, a call that
raised leaves nothing in flight for the next, a closed pool leaves nothing behind, and a killed
pool's directory is removed by the next one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile

import psutil
import pytest

from common.config import SandboxConfig
from common.types import ExecutionJob, Verdict
from sandbox.trusted import tasks
from sandbox.trusted.handles import WorkerHandle
from sandbox.trusted.pool import MAX_SOURCE_BYTES, SandboxPool, remove_abandoned_dirs
from tests.unit.sandbox.helpers import F_TESTS, GOOD_F


def test_dead_worker_with_jobs_in_flight_is_replaced_and_nothing_is_lost(monkeypatch):
    """The worker is killed (SIGKILL, and reaped) as soon as the pool has handed it its first
    job, a program that sleeps 1 s: that job is in flight whatever the machine's speed, and
    the jobs behind it are queued or sent to a dead worker. No timer races the job."""
    config = SandboxConfig(num_workers=1, timeout_s=5.0, test_timeout_s=3.0, cache=False)
    slow = "import time\ntime.sleep(1.0)\n" + GOOD_F
    jobs = [ExecutionJob(slow, F_TESTS)] + [ExecutionJob(GOOD_F, F_TESTS)] * 3
    dispatch, killed = WorkerHandle.dispatch, []

    def dispatch_then_kill(worker: WorkerHandle, task, limits: dict) -> None:
        dispatch(worker, task, limits)
        if not killed:
            killed.append(worker.proc.pid)
            worker.proc.send_signal(signal.SIGKILL)
            worker.proc.wait()

    monkeypatch.setattr(WorkerHandle, "dispatch", dispatch_then_kill)
    with SandboxPool(config) as solo:
        results = solo.run(jobs)
        assert killed and [r.verdict for r in results] == [Verdict.PASSED] * 4
        assert solo.stats()["sandbox/worker_restarts"] == 1.0
        assert solo._workers[0].proc.pid != killed[0]


def test_a_job_that_ends_its_worker_twice_is_the_programs_failure_not_a_mask(monkeypatch):
    """A worker that dies on the same job on both tries (killed here as each try is handed
    over, as a program that found a way to end its worker would): the verdict is
    ``runtime_error``, never ``infra_error``, which the reward masks and a policy could learn
    to reach; the next job passes on a third worker."""
    config = SandboxConfig(num_workers=1, timeout_s=5.0, test_timeout_s=3.0, cache=False)
    hostile = "import time\ntime.sleep(1.0)\n" + GOOD_F
    dispatch, killed = WorkerHandle.dispatch, []

    def dispatch_then_kill(worker: WorkerHandle, task, limits: dict) -> None:
        dispatch(worker, task, limits)
        if task.job.code == hostile:
            killed.append(worker.proc.pid)
            worker.proc.send_signal(signal.SIGKILL)
            worker.proc.wait()

    monkeypatch.setattr(WorkerHandle, "dispatch", dispatch_then_kill)
    with SandboxPool(config) as solo:
        results = solo.run([ExecutionJob(hostile, F_TESTS), ExecutionJob(GOOD_F, F_TESTS)])
        assert len(killed) == 2
        assert [r.verdict for r in results] == [Verdict.RUNTIME_ERROR, Verdict.PASSED]
        assert "twice" in results[0].detail


def test_a_call_that_raised_leaves_no_job_in_flight_for_the_next(monkeypatch):
    """An exception out of ``run`` (injected here: planning one job's tests fails; for real, a
    worker that cannot restart, or Ctrl-C) comes after the call sent other jobs to a worker.
    The next call must neither collect their results into its own list nor count them in its
    metrics."""
    unplannable = "def f(x):\n    return 'cannot plan'\n"
    plan = tasks._plan

    def plan_or_fail(job: ExecutionJob):
        if job.code == unplannable:
            raise RuntimeError("planning failed")
        return plan(job)

    monkeypatch.setattr(tasks, "_plan", plan_or_fail)
    oversized = "#" * MAX_SOURCE_BYTES + "\n" + GOOD_F  # judged without a worker: index 0
    with SandboxPool(SandboxConfig(num_workers=1, cache=False)) as solo:
        # index 1 is sent to the worker, whose queue has room for index 2, which fails to plan
        aborted = [ExecutionJob(code, F_TESTS) for code in (oversized, GOOD_F, unplannable)]
        with pytest.raises(RuntimeError, match="planning failed"):
            solo.run(aborted)
        solo.stats()  # what the aborted call left in the metrics
        wrong = ExecutionJob("def f(x):\n    return 0\n", F_TESTS)
        assert [r.verdict for r in solo.run([wrong])] == [Verdict.FAILED]
        assert solo.stats()["sandbox/verdict/failed"] == 1.0  # no PASSED from the aborted call


def test_close_leaves_no_processes_or_files():
    temp_pool = SandboxPool(SandboxConfig(num_workers=2))
    temp_pool.run([ExecutionJob("import os, time\nos.fork()\nos.setsid()", ())])
    workers = [psutil.Process(w.proc.pid) for w in temp_pool._workers]
    family = workers + [c for w in workers for c in w.children(recursive=True)]
    temp_pool.close()
    _, alive = psutil.wait_procs(family, timeout=10)  # gone or a zombie; a survivor fails
    assert not [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not os.path.exists(temp_pool._dir)


def test_directory_of_a_killed_pool_is_removed_by_the_next_pool():
    script = (
        "import time\nfrom common.config import SandboxConfig\n"
        "from sandbox.trusted.pool import SandboxPool\n"
        "pool = SandboxPool(SandboxConfig(num_workers=1))\nprint(pool._dir, flush=True)\n"
        "time.sleep(120)\n"
    )
    crashed = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    abandoned = crashed.stdout.readline().strip()
    crashed.kill()  # SIGKILL: close() never runs
    crashed.wait()
    assert os.path.isdir(abandoned)
    with SandboxPool(SandboxConfig(num_workers=1)) as live:
        assert not os.path.exists(abandoned)  # the new pool removed it on start
        assert remove_abandoned_dirs(tempfile.gettempdir()) == []  # its own dir is kept
        assert os.path.isdir(live._dir)
