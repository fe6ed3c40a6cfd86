"""SandboxPool: the trusted front of a pool of long-lived, isolated sandbox workers.

The front parses tests, sends each worker only what the untrusted child may see (the program
and the test expressions, never the expected values), judges the records that come back and
keeps the pool alive: a worker that dies or stops answering is replaced and its job retried
once; only if that fails too is the job an ``infra_error``, which the reward masks instead of
scoring as a wrong answer.

It is a plain class with no signal handlers or threads, so it also works as a Ray actor.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
import tempfile
import time
from collections import Counter, deque

import zmq

from common.config import SandboxConfig
from common.types import ExecutionJob, ExecutionResult, Verdict
from sandbox import isolation, testplan
from sandbox.cache import ResultCache, job_key
from sandbox.judging import Judgement
from sandbox.workers import WorkerHandle

log = logging.getLogger(__name__)

MAX_SOURCE_BYTES = 1024 * 1024
BACKSTOP_S = 10.0  # extra time a worker gets beyond the job's own deadline before it is killed


class SandboxIsolationError(RuntimeError):
    """The kernel allows no namespace isolation and the configuration does not accept that."""


@dataclasses.dataclass
class _Task:
    index: int
    job: ExecutionJob
    plans: list[testplan.TestPlan]
    stop_at_first_failure: bool
    attempts: int = 0
    judgement: Judgement | None = None


class SandboxPool:
    """Runs ``ExecutionJob`` s in parallel on ``config.num_workers`` isolated workers."""

    def __init__(self, config: SandboxConfig, *, isolation_mode: str = "auto") -> None:
        self.config = config
        self._dir = tempfile.mkdtemp(prefix="sandbox-")
        os.chmod(self._dir, 0o711)  # children (another uid) must reach their scratch dir by path
        self._context = zmq.Context()
        self._cache = ResultCache() if config.cache else None
        self._executions: Counter[str] = Counter()
        self._durations: list[float] = []
        self._cache_hits = 0
        self._restarts = 0
        self._closed = False
        self._workers: list[WorkerHandle] = []
        try:
            for index in range(config.num_workers):
                self._workers.append(
                    WorkerHandle(index, self._dir, self._context, config.memory_mb, isolation_mode)
                )
            for worker in self._workers:
                worker.wait_ready()
        except BaseException:
            self.close()
            raise
        levels = [w.isolation for w in self._workers]
        self.isolation: str = min(levels, key=lambda level: isolation.LEVEL_NUMBER[level])
        log.info("sandbox: %d workers, isolation %s", len(self._workers), self.isolation)
        if self.isolation == isolation.LEVEL_RLIMITS and not config.allow_unisolated:
            self.close()
            raise SandboxIsolationError(
                "the kernel allows no user/network/PID namespaces here, so untrusted code would "
                "run with rlimits only; set sandbox.allow_unisolated = true to accept that"
            )

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(
        self, jobs: list[ExecutionJob], stop_at_first_failure: bool = False
    ) -> list[ExecutionResult]:
        """Execute ``jobs`` in parallel and return their results in input order."""
        if self._closed:
            raise RuntimeError("SandboxPool is closed")
        results: list[ExecutionResult | None] = [None] * len(jobs)
        queue: deque[_Task] = deque()
        for index, job in enumerate(jobs):
            early = self._early_result(job, stop_at_first_failure)
            if early is not None:
                results[index] = early
                continue
            shadowed = testplan.shadowed_names(job.code, job.tests)
            plans = [testplan.plan_test(t, job.setup_code, shadowed) for t in job.tests]
            queue.append(_Task(index, job, plans, stop_at_first_failure))
        self._drive(queue, results)
        for task_result, job in zip(results, jobs):
            if self._cache is not None and task_result.verdict is not Verdict.INFRA_ERROR:
                self._cache.put(job_key(job, stop_at_first_failure), task_result)
        return [dataclasses.replace(r, test_verdicts=list(r.test_verdicts)) for r in results]

    def _early_result(self, job: ExecutionJob, stop: bool) -> ExecutionResult | None:
        """A cached result, or a verdict that needs no execution (oversized program)."""
        if self._cache is not None:
            cached = self._cache.get(job_key(job, stop))
            if cached is not None:
                self._cache_hits += 1
                return cached
        if len(job.code.encode("utf-8", "surrogatepass")) > MAX_SOURCE_BYTES:
            detail = f"program larger than {MAX_SOURCE_BYTES} bytes"
            return ExecutionResult(Verdict.SYNTAX_ERROR, 0, len(job.tests), [], 0.0, detail)
        return None

    def _drive(self, queue: deque[_Task], results: list) -> None:
        """Dispatch tasks to idle workers and collect results until all are done."""
        poller_timeout_ms = 50
        while queue or any(w.task is not None for w in self._workers):
            for worker in self._workers:
                if worker.task is None and queue:
                    task = queue.popleft()
                    task.attempts += 1
                    task.judgement = Judgement(task.plans, task.stop_at_first_failure)
                    worker.dispatch(task, self._limits())
            poller = zmq.Poller()
            for worker in self._workers:
                if worker.task is not None:
                    poller.register(worker.sock, zmq.POLLIN)
            events = dict(poller.poll(poller_timeout_ms))
            for worker in self._workers:
                if worker.task is None:
                    continue
                if worker.sock in events:
                    self._on_messages(worker, results, queue)
                elif not worker.alive() or time.monotonic() > worker.deadline:
                    self._replace(worker, queue, results)

    def _limits(self) -> dict:
        config = self.config
        return {
            "timeout_s": config.timeout_s,
            "test_timeout_s": min(config.test_timeout_s, config.timeout_s),
            "max_output_bytes": config.max_output_bytes,
            "backstop_s": config.timeout_s + BACKSTOP_S,
        }

    def _on_messages(self, worker: WorkerHandle, results: list, queue: deque) -> None:
        while worker.task is not None and worker.sock.poll(0):
            message = worker.sock.recv_json()
            task = worker.task
            if message.get("id") != worker.job_id:
                continue
            if message.get("op") == "record":
                if task.judgement.on_record(message.get("rec") or {}):
                    worker.stop()
            elif message.get("op") == "done":
                worker.task = None
                if message.get("status") == "infra":
                    self._retry_or_fail(task, queue, results, "worker could not start a child")
                    continue
                result = task.judgement.finish(
                    message.get("status", ""),
                    int(message.get("signal") or 0),
                    float(message.get("duration_ms") or 0.0),
                )
                self._record(result)
                results[task.index] = result

    def _replace(self, worker: WorkerHandle, queue: deque, results: list) -> None:
        task = worker.task
        worker.task = None
        log.warning("sandbox: worker %d died or hung; replacing it", worker.index)
        self._restarts += 1
        try:
            worker.restart()
        except Exception as exc:  # the pool keeps serving with the workers it has
            log.error("sandbox: could not restart worker %d: %s", worker.index, exc)
        self._retry_or_fail(task, queue, results, "sandbox worker died")

    def _retry_or_fail(self, task: _Task, queue: deque, results: list, why: str) -> None:
        if task.attempts < 2:
            queue.appendleft(task)
            return
        result = ExecutionResult(Verdict.INFRA_ERROR, 0, len(task.plans), [], 0.0, why)
        self._record(result)
        results[task.index] = result

    def _record(self, result: ExecutionResult) -> None:
        self._executions[result.verdict.value] += 1
        self._durations.append(result.duration_ms)

    def stats(self) -> dict[str, float]:
        """Metrics since the previous call (then reset)."""
        total = sum(self._executions.values())
        out: dict[str, float] = {
            f"sandbox/verdict/{v.value}": (self._executions[v.value] / total if total else 0.0)
            for v in Verdict
        }
        durations = sorted(self._durations)
        out["sandbox/exec_p50_ms"] = _percentile(durations, 0.50)
        out["sandbox/exec_p99_ms"] = _percentile(durations, 0.99)
        out["sandbox/cache_hits"] = float(self._cache_hits)
        out["sandbox/worker_restarts"] = float(self._restarts)
        out["sandbox/isolation_level"] = isolation.LEVEL_NUMBER[self.isolation]
        self._executions.clear()
        self._durations.clear()
        self._cache_hits = 0
        self._restarts = 0
        return out

    def close(self) -> None:
        """Stop every worker (and so every child) and remove the pool's temp directory."""
        if self._closed:
            return
        self._closed = True
        for worker in self._workers:
            worker.kill()
        self._context.term()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    return values[min(len(values) - 1, int(q * len(values)))]
