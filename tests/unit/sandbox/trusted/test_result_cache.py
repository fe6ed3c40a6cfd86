"""The result cache (``sandbox/trusted/result_cache.py``): keyed on every input of a job, bounded,
and handing out copies."""

from __future__ import annotations

from common.types import ExecutionJob, ExecutionResult, Verdict
from sandbox.trusted.result_cache import ResultCache, job_key


def result(verdict, passed=0, total=4):
    return ExecutionResult(verdict, passed, total)


def test_cache_key_depends_on_every_input_and_returns_copies():
    job = ExecutionJob("x = 1", ("assert x == 1",))
    assert job_key(job, False) != job_key(job, True)
    assert job_key(job, False) != job_key(ExecutionJob("x = 1", ("assert x == 1",), "y = 2"), False)
    cache = ResultCache(max_entries=1)
    cache.put("a", result(Verdict.PASSED))
    cache.get("a").test_verdicts.append(Verdict.FAILED)
    assert cache.get("a").test_verdicts == []
    cache.put("b", result(Verdict.PASSED))
    assert cache.get("a") is None
