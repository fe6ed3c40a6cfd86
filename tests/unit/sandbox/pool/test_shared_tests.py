"""The two sides of whole programs' tests by reference (``sandbox/trusted/shared_tests.py``),
with a dictionary standing in for Ray's object store; the real store, through the client and
pool ``launch.train`` uses, is in ``tests/integration/test_stdio_by_reference.py``."""

from __future__ import annotations

import pytest

from common.types import Problem, StdioSpec, StdioTest
from sandbox.trusted.shared_tests import SpecRefs, SpecStore, spec_bytes


class ObjectStore:
    """``put`` and ``get`` by a counter, counting both."""

    def __init__(self) -> None:
        self.objects: dict[int, StdioSpec] = {}
        self.gets = 0

    def put(self, spec: StdioSpec) -> int:
        self.objects[len(self.objects)] = spec
        return len(self.objects) - 1

    def get(self, refs: list[int]) -> list[StdioSpec]:
        self.gets += 1
        return [self.objects[ref] for ref in refs]


def _problem(name: str, size: int = 10) -> Problem:
    spec = StdioSpec((StdioTest("t", name.encode() * size, b"2" * size),))
    return Problem(name, "Read a number.", (), stdio=spec)


def test_each_spec_is_put_once_and_fetched_once():
    store = ObjectStore()
    refs, pool = SpecRefs(store.put), SpecStore(store.get)
    a, b = _problem("a"), _problem("b", 20)
    function = Problem("f", "Write f.", ("assert f(1) == 2",)).job("def f(x): return x + 1")
    fetched = []
    for calls in ([a], [a, b, a], [b, a]):
        jobs = [p.job(f"print({i})") for i, p in enumerate(calls)] + [function]
        bare, sent = refs.split(jobs)
        assert all(job.stdio is None for job in bare) and sent[-1] is None
        before = pool.fetched
        assert pool.join(bare, sent) == jobs
        fetched.append(pool.fetched - before)
    assert fetched == [1, 1, 0]
    assert len(store.objects) == 2  # put once each
    assert pool.fetched == 2 and store.gets == 2  # fetched once each, one round trip per call


def test_both_sides_hold_at_most_their_bytes_and_put_or_fetch_again_what_they_let_go():
    store = ObjectStore()
    a, b = _problem("a"), _problem("b")
    assert a.stdio != b.stdio
    limit = spec_bytes(a.stdio) + spec_bytes(b.stdio) - 1  # room for one spec, not two
    refs, pool = SpecRefs(store.put, limit), SpecStore(store.get, limit)
    for problem in (a, b, a):
        jobs = [problem.job("print(1)")]
        assert pool.join(*refs.split(jobs)) == jobs
    assert len(store.objects) == 3  # a was dropped for b, then put again
    assert pool.fetched == 3


def test_a_call_needing_more_than_the_store_holds_still_gets_every_spec():
    store = ObjectStore()
    problems = [_problem(name) for name in "abc"]
    refs, pool = SpecRefs(store.put), SpecStore(store.get, max_bytes=1)
    jobs = [p.job("print(1)") for p in problems]
    assert pool.join(*refs.split(jobs)) == jobs
    assert pool.join(*refs.split(jobs)) == jobs  # held: the last; fetched again: the others
    assert pool.fetched == 5


def test_references_must_match_the_jobs():
    with pytest.raises(ValueError, match="1 test references for 2 jobs"):
        SpecStore(ObjectStore().get).join([_problem("a").job("x")] * 2, [0])
