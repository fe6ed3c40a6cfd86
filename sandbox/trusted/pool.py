"""SandboxPool: the trusted front of a pool of long-lived, isolated sandbox workers.

The front sends each worker only what the untrusted child may see (never the expected values),
judges the records that come back and keeps the pool alive: a worker that dies or stops
answering is replaced and its job retried once. A plain class with no signal handlers or
threads, so it also works as a Ray actor.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import select
import shutil
import sys
import tempfile
import time
import warnings
from collections import Counter, deque

from common.config import SandboxConfig
from common.types import ExecutionJob, ExecutionResult, Verdict
from sandbox.isolated import seccomp
from sandbox.trusted import cgroups, host, native_build
from sandbox.trusted.handles import WorkerHandle, worker_cpus
from sandbox.trusted.languages import LANGUAGES
from sandbox.trusted.result_cache import Lru, ResultCache, job_key
from sandbox.trusted.shared_tests import SpecStore
from sandbox.trusted.stdio import StdioRun
from sandbox.trusted.tasks import FunctionTask
from sandbox.wire.levels import LEVEL_NAMED, LEVEL_NUMBER, LEVEL_RLIMITS

log = logging.getLogger(__name__)

MAX_SOURCE_BYTES = 1024 * 1024


class SandboxIsolationError(RuntimeError):
    """The kernel allows no namespace isolation and the configuration does not accept that."""


class SandboxPool:
    """Runs ``ExecutionJob`` s in parallel on ``config.num_workers`` isolated workers."""

    def __init__(
        self, config: SandboxConfig, *, isolation_mode: str = "auto", cgroup: bool = True
    ) -> None:
        """``cgroup=False``: no execution cgroup even where one could be had, the fallback
        (``sandbox/trusted/cgroups.py``, docs/sandbox.md); for its tests."""
        self.config = config
        self._cgroups: cgroups.PoolGroups | None = None
        remove_abandoned_dirs(tempfile.gettempdir())
        self._dir = tempfile.mkdtemp(prefix=f"sandbox-{os.getpid()}-{host.pid_namespace()}-")
        os.chmod(self._dir, 0o711)  # children (another uid) must reach their scratch dir by path
        self._cache = ResultCache() if config.cache else None
        self._binaries = Lru(64)  # native programs by Build.key(), compiled once
        self._specs = SpecStore()  # whole programs' tests sent by reference
        self._executions: Counter[str] = Counter()
        self._durations: list[float] = []
        self._cache_hits = 0
        self._split_tests = 0  # tests run in a process of their own (sandbox/isolated/split.py)
        self._restarts = 0
        self._pool_restarts = int(_restarted_by_ray())  # reported once, by the next stats()
        self._closed = False
        self._workers: list[WorkerHandle] = []
        loop_library, self._loop_note = None, "sandbox.zygote_loop = 'python'"
        if config.zygote_loop == "auto":  # built once per node and source version, then cached
            loop_library, self._loop_note = native_build.build()
        try:
            self.memory_layer = self._open_cgroups(cgroup)
            self._start_workers(isolation_mode, loop_library)
        except BaseException:
            self.close()
            raise
        levels = [w.isolation for w in self._workers]
        self.isolation: str = min(levels, key=lambda level: LEVEL_NUMBER[level])
        log.info("sandbox: %s", self.describe())
        if not self.own_proc and self.isolation != LEVEL_RLIMITS:
            log.warning(
                "sandbox: the kernel refused a /proc of the workers' PID namespaces (a container "
                "runtime that masks parts of /proc?): programs can list the host's processes "
                "and their command lines"
            )
        self._refuse_below(config.min_isolation)

    def _start_workers(self, isolation_mode: str, loop_library: str | None) -> None:
        config = self.config
        for index, cpu in enumerate(worker_cpus(config.cpu_affinity, config.num_workers)):
            self._workers.append(
                WorkerHandle(
                    index,
                    self._dir,
                    config.memory_mb,
                    isolation_mode,
                    cpu,
                    config.pin_hot_pages,
                    loop_library,
                    self._cgroups.worker(index) if self._cgroups is not None else None,
                    memory_fallback=self._cgroups is None and _fallback_possible(),
                )
            )
        for worker in self._workers:
            worker.wait_ready()

    def _refuse_below(self, min_isolation: str) -> None:
        if LEVEL_NUMBER[self.isolation] >= LEVEL_NUMBER[LEVEL_NAMED[min_isolation]]:
            return
        why = "; ".join(sorted({w.lock_note for w in self._workers if w.lock_note}))
        self.close()
        raise SandboxIsolationError(
            f"the sandbox reached only isolation {self.isolation} here"
            f"{f' ({why})' if why else ''}, below sandbox.min_isolation = "
            f"{min_isolation!r}; see docs/sandbox.md for what each level stops, and "
            "lower sandbox.min_isolation only on a machine that runs nothing else of value"
        )

    def describe(self) -> str:
        """One line on how the pool runs: isolation, CPUs, pinned pages, the zygote's loop
        (what ``launch.train`` logs once the pool is up, from the pool's Ray actor)."""
        return "; ".join(
            [
                f"{len(self._workers)} workers, isolation {self.isolation}+{self.memory_layer}",
                "own /proc" if self.own_proc else "programs see the host's /proc (command lines)",
                "not pinned to CPUs" if None in self.cpus else f"pinned to CPUs {self.cpus}",
                self.pinning,
                self.zygote_loop,
            ]
        )

    def _open_cgroups(self, wanted: bool) -> str:
        """The workers' execution cgroups where they can be had; returns the memory layer's
        name in the isolation line: ``cgroup(memory,pids)``, or the fallback
        ``no-cgroup(fork refused, memfd refused)``, whose bound is RLIMIT_AS of one process."""
        why = "the pool was started with cgroup=False"
        if wanted:
            config = self.config
            self._cgroups, why = cgroups.open_pool_groups(config.memory_mb, config.num_workers)
        if self._cgroups is not None:
            return self._cgroups.describe()
        if not _fallback_possible():
            log.warning(
                "sandbox: no cgroup for executions (%s) and no seccomp table for this "
                "machine: an execution's memory is not bounded",
                why,
            )
            return f"no-cgroup(unbounded: no seccomp table for {os.uname().machine})"
        log.info("sandbox: no cgroup for executions (%s); fork and memfd refused instead", why)
        return "no-cgroup(fork refused, memfd refused)"

    def memory_peaks(self) -> list[int | None]:
        """The most memory each worker's execution group held at once since the previous
        call (bytes; None without a cgroup or where the kernel keeps no peak)."""
        if self._cgroups is None:
            return [None] * len(self._workers)
        peaks = []
        for worker in self._workers:
            group = self._cgroups.worker(worker.index)
            peaks.append(group.peak_bytes())
            group.reset_peak()
        return peaks

    @property
    def own_proc(self) -> bool:
        """Whether programs see only their PID namespace in ``/proc`` (every worker mounted
        its own; see ``sandbox/isolated/namespaces.py``), not the host's processes."""
        return all(worker.own_proc for worker in self._workers)

    @property
    def pinned_pages(self) -> list[int]:
        """Hot pages each worker's zygote pinned, which its forks copy at once
        (``sandbox/isolated/pinning.py``); 0 where it pinned none."""
        return [worker.pinned for worker in self._workers]

    @property
    def pinning(self) -> str:
        """One line on the pinned hot pages: how many per worker, or why there are none."""
        if not self.config.pin_hot_pages:
            return "hot pages not pinned (sandbox.pin_hot_pages = false)"
        notes = "; ".join(sorted({w.pin_note for w in self._workers if not w.pinned}))
        pinned = self.pinned_pages
        if not any(pinned):
            return f"hot pages not pinned: {notes}"
        line = f"hot pages pinned: {pinned} per worker (forks copy them at once)"
        return f"{line}; where 0: {notes}" if notes else line

    @property
    def zygote_loop(self) -> str:
        """One line on the loop the zygotes run: in C (``sandbox/isolated/_zygote.c``) or in Python,
        and why."""
        compiled = sum(worker.compiled_loop for worker in self._workers)
        if compiled == len(self._workers):
            return "zygote loop in C"
        notes = sorted({w.loop_note for w in self._workers if w.loop_note})
        why = self._loop_note or "; ".join(notes) or "no PID namespace"
        return f"zygote loop in Python in {len(self._workers) - compiled} workers ({why})"

    @property
    def cpus(self) -> list[int | None]:
        """The CPU each worker (its zygote and children too) is pinned to; None: not pinned."""
        return [worker.cpu for worker in self._workers]

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(
        self,
        jobs: list[ExecutionJob],
        stop_at_first_failure: bool = False,
        stdio_refs: list | None = None,
    ) -> list[ExecutionResult]:
        """Execute ``jobs`` in parallel and return their results in input order. ``stdio_refs``:
        per job, the object-store reference of its whole-program tests, sent without them
        (``shared_tests.py``), or None."""
        if self._closed:
            raise RuntimeError("SandboxPool is closed")
        if stdio_refs is not None:
            jobs = self._specs.join(jobs, stdio_refs)
        results: list[ExecutionResult | None] = [None] * len(jobs)
        queue: deque = deque()  # tasks (sandbox/trusted/tasks.py): one execution each
        for index, job in enumerate(jobs):
            early = self._early_result(job, stop_at_first_failure)
            if early is not None:
                results[index] = early
            elif job.stdio is not None:  # one execution per test
                run = StdioRun(index, job, stop_at_first_failure, self._binaries)
                queue.extend(run.first_tasks())
            else:
                queue.append(FunctionTask(index, job, stop_at_first_failure))
        try:
            self._drive(queue, results)
        except BaseException:  # KeyboardInterrupt (Ctrl-C in a local run) too
            self._abandon_in_flight()
            raise
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
                # Verdict fractions describe every judged completion, cached or not; latency
                # percentiles describe real executions only.
                self._executions[cached.verdict.value] += 1
                return cached
        if job.language not in LANGUAGES or (job.language != "python" and job.stdio is None):
            detail = f"programs in {job.language!r} are not judged (only {', '.join(LANGUAGES)})"
            return ExecutionResult(Verdict.SYNTAX_ERROR, 0, job.num_tests, [], 0.0, detail)
        if len(job.code.encode("utf-8", "surrogatepass")) > MAX_SOURCE_BYTES:
            detail = f"program larger than {MAX_SOURCE_BYTES} bytes"
            return ExecutionResult(Verdict.SYNTAX_ERROR, 0, job.num_tests, [], 0.0, detail)
        return None

    def _drive(self, queue: deque, results: list) -> None:
        poller_timeout_ms = 50
        while queue or any(w.in_flight for w in self._workers):
            for worker in self._workers:
                while worker.has_room() and queue:
                    task = queue.popleft()
                    message = task.begin(self.config)
                    if message.get("split") and task.attempts == 1:
                        self._split_tests += len(message["parts"])
                    worker.dispatch(task, message)
            poller = select.poll()
            for worker in self._workers:
                if worker.in_flight:
                    poller.register(worker, select.POLLIN | (select.POLLOUT * bool(worker.outbox)))
            events = dict(poller.poll(poller_timeout_ms))
            for worker in self._workers:
                if not worker.in_flight:
                    continue
                event = events.get(worker.fileno(), 0)
                if event & select.POLLOUT:
                    worker.flush()
                if event & ~select.POLLOUT:
                    self._on_messages(worker, results, queue)
                if worker.in_flight and (
                    worker.eof or not worker.alive() or time.monotonic() > worker.deadline
                ):
                    self._replace(worker, queue, results)

    def _on_messages(self, worker: WorkerHandle, results: list, queue: deque) -> None:
        """Judge the records that came in; a ``done`` finishes the worker's running job."""
        for message in worker.receive():
            task = worker.task
            if task is None or message.get("id") != worker.job_id:
                continue  # a late message for a job that was stopped or replaced
            if message.get("op") == "out":  # a whole program's stdout
                task.on_output(message.get("data") or b"")
                continue
            for record in message.get("recs") or []:
                if task.on_record(record):  # never raises: a bad record fails a test
                    if message.get("op") == "records":
                        worker.stop()
                    break
            if message.get("op") != "done":
                continue
            worker.finished()
            if message.get("status") == "infra":
                self._retry_or_fail(task, queue, results, "worker could not start a child")
                continue
            self._settle(task.finish(message), task.index, queue, results)

    def _settle(self, outcome: tuple, index: int, queue: deque, results: list) -> None:
        """A task's outcome: its job's result once it has one, and the tasks to run next
        (first: they belong to a job already started)."""
        result, more = outcome
        queue.extendleft(reversed(more))
        if result is not None:
            self._executions[result.verdict.value] += 1
            self._durations.append(result.duration_ms)
            results[index] = result

    def _replace(self, worker: WorkerHandle, queue: deque, results: list) -> None:
        """A dead or hung worker: restart it, retry its running job, requeue the rest (they
        never started: no retry used up)."""
        running, *waiting = worker.take_all()
        log.warning("sandbox: worker %d died or hung; replacing it", worker.index)
        self._restart(worker)
        for task in reversed(waiting):
            task.attempts -= 1
            queue.appendleft(task)
        self._retry_or_fail(running, queue, results, "sandbox worker died", ours=False)

    def _abandon_in_flight(self) -> None:
        """Restart every worker that still holds jobs of a call that raised: left in flight,
        the next call would judge them into its own list, at an index of the aborted call."""
        for worker in self._workers:
            if worker.in_flight or worker.outbox:
                worker.take_all()
                log.warning("sandbox: a call raised; restarting worker %d", worker.index)
                self._restart(worker)

    def _restart(self, worker: WorkerHandle) -> None:
        self._restarts += 1
        try:
            worker.restart()
        except Exception as exc:  # the pool keeps serving with the workers it has
            log.error("sandbox: could not restart worker %d: %s", worker.index, exc)

    def _retry_or_fail(
        self, task, queue: deque, results: list, why: str, ours: bool = True
    ) -> None:
        """Retry ``task`` once; after a second failure, judge it. ``ours``: the pool's failure
        (the zygote could not fork), ``infra_error``, which the reward masks. Otherwise the
        program ended or stalled its worker twice: it failed (``runtime_error``), since a
        verdict a program can reach on purpose must never be a mask (a policy would learn to
        reach it); the log says so, as it is a bug of the worker to fix."""
        if task.attempts < 2:
            queue.appendleft(task)
            return
        verdict = Verdict.INFRA_ERROR
        if not ours:
            verdict = Verdict.RUNTIME_ERROR
            why = f"{why} twice running this program"
            log.warning("sandbox: a program's execution ended its worker twice (%s)", why)
        self._settle(task.give_up(verdict, why), task.index, queue, results)

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
        out["sandbox/tests_fetched"] = float(self._specs.fetched)
        out["sandbox/tests_split"] = float(self._split_tests)
        out["sandbox/worker_restarts"] = float(self._restarts)
        out["sandbox/pool_restarts"] = float(self._pool_restarts)
        out["sandbox/isolation_level"] = LEVEL_NUMBER[self.isolation]
        out["sandbox/pinned_frac"] = sum(map(bool, self.pinned_pages)) / len(self._workers)
        out["sandbox/memory_cgroup"] = float(self._cgroups is not None)
        self._executions.clear()
        self._durations.clear()
        self._cache_hits = self._restarts = self._pool_restarts = self._specs.fetched = 0
        self._split_tests = 0
        return out

    def close(self) -> None:
        """Stop every worker (and so every child) and remove the pool's temp directory."""
        if self._closed:
            return
        self._closed = True
        for worker in self._workers:
            worker.kill()
        if self._cgroups is not None:
            self._cgroups.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


def remove_abandoned_dirs(parent: str) -> list[str]:
    """Remove the temp directories of this user's pools whose process is gone; returns them.
    A pool killed before :meth:`SandboxPool.close` takes its workers with it but leaves its
    directory behind. Never the directory of a live process, of another user, or of another
    PID namespace (a container sharing ``/tmp``), whose liveness cannot be seen from here."""
    removed, namespace = [], host.pid_namespace()
    for entry in os.scandir(parent):
        parts = entry.name.split("-")
        if len(parts) != 4 or parts[0] != "sandbox" or parts[2] != namespace:
            continue
        if not parts[1].isdigit() or not entry.is_dir(follow_symlinks=False):
            continue
        if entry.stat(follow_symlinks=False).st_uid != os.getuid() or host.alive(int(parts[1])):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(entry.path)
    return removed


def _fallback_possible() -> bool:
    """Whether children can refuse themselves a second process where no cgroup bounds them:
    the seccomp filter has a table for this machine."""
    return os.uname().machine in seccomp.TABLES


def _restarted_by_ray() -> bool:
    ray = sys.modules.get("ray")  # not imported: not in a Ray actor
    if ray is None or not ray.is_initialized():
        return False
    context = ray.get_runtime_context()
    if context.get_actor_id() is None:
        return False
    with warnings.catch_warnings():  # Ray's own property reads its deprecated ``actor_id``
        warnings.simplefilter("ignore", DeprecationWarning)
        return bool(context.was_current_actor_reconstructed)


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    return values[min(len(values) - 1, int(q * len(values)))]
