"""Whole programs' tests by reference: each problem's tests travel to the pool's node once.

A contest problem's tests can be megabytes (CodeContests' generated tests, a 50 MB answer); a
run judges the same problem again and again (a group's G samples, dynamic sampling's extra
rounds, every epoch, every evaluation). Sent inline, a call to the pool actor carries each
problem's tests once (pickle keeps one copy of a spec its jobs share), but every call again.

So the driver's :class:`launch.fleet.clients.SandboxClient` puts a spec into Ray's object store
once (:class:`SpecRefs`) and sends the jobs without it, each with its spec's reference; the
pool (:class:`SpecStore`) fetches a reference it has not seen, once, and keeps the spec. An
object lives as long as the driver holds its reference, so a pool that Ray restarted fetches
again what it needs: nothing is resent by hand, no call fails for a spec it lacks. Both sides
are bounded by the bytes of the tests they hold (least recently used first out); a spec the
client let go is put again when it comes back.

The key is the spec itself (a frozen dataclass: equal specs share an entry; hashing the test
bytes once, Python caches a ``bytes`` object's hash).
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

from common.types import ExecutionJob, StdioSpec

HELD_BYTES = 1 << 30  # each side's bound: a few hundred typical contest problems' tests


def spec_bytes(spec: StdioSpec) -> int:
    """The bytes a spec holds: its inline inputs and answers (a file counts as its path)."""
    return sum(len(data) if isinstance(data, bytes) else len(str(data)) for data in _data(spec))


def _data(spec: StdioSpec) -> list[bytes | Path]:
    return [data for test in spec.tests for data in (test.input, test.answer)]


class _Bounded:
    """An LRU map bounded by the bytes of its values (at least the last entry stays)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.entries: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self.held = 0

    def get(self, key: Hashable) -> Any | None:
        entry = self.entries.get(key)
        if entry is None:
            return None
        self.entries.move_to_end(key)
        return entry[0]

    def put(self, key: Hashable, value: Any, size: int) -> None:
        self.entries[key] = (value, size)
        self.held += size
        while self.held > self.max_bytes and len(self.entries) > 1:
            _, (_, dropped) = self.entries.popitem(last=False)
            self.held -= dropped


class SpecRefs:
    """The client's side: one object-store reference per spec, put on first use."""

    def __init__(self, put: Callable[[StdioSpec], Any], max_bytes: int = HELD_BYTES) -> None:
        self._put = put
        self._refs = _Bounded(max_bytes)

    def ref(self, spec: StdioSpec) -> Any:
        ref = self._refs.get(spec)
        if ref is None:
            ref = self._put(spec)
            self._refs.put(spec, ref, spec_bytes(spec))
        return ref

    def split(self, jobs: list[ExecutionJob]) -> tuple[list[ExecutionJob], list[Any]]:
        """The jobs without their specs, and each one's reference (None for a function job)."""
        refs = [self.ref(job.stdio) if job.stdio is not None else None for job in jobs]
        bare = [
            job if ref is None else dataclasses.replace(job, stdio=None)
            for job, ref in zip(jobs, refs)
        ]
        return bare, refs


def fetch(refs: list[Any]) -> list[StdioSpec]:
    """The specs behind object-store references (in the pool, a Ray actor)."""
    import ray  # the pool runs without Ray too (sandbox.check, the benches): only refs need it

    return ray.get(refs)


class SpecStore:
    """The pool's side: the specs of the references it was sent, each fetched once."""

    def __init__(
        self, get: Callable[[list[Any]], list[StdioSpec]] = fetch, max_bytes: int = HELD_BYTES
    ) -> None:
        self._get = get
        self._specs = _Bounded(max_bytes)
        self.fetched = 0  # specs fetched from the object store (the pool's stats)

    def join(self, jobs: list[ExecutionJob], refs: list[Any]) -> list[ExecutionJob]:
        """The jobs with their specs back, fetching the ones not held in one round trip."""
        if len(refs) != len(jobs):
            raise ValueError(f"{len(refs)} test references for {len(jobs)} jobs")
        specs: dict[Any, StdioSpec] = {}
        for ref in refs:
            spec = None if ref is None else self._specs.get(ref)
            if spec is not None:
                specs[ref] = spec
        missing = list({ref: None for ref in refs if ref is not None and ref not in specs})
        if missing:
            for ref, spec in zip(missing, self._get(missing), strict=True):
                specs[ref] = spec
                self._specs.put(ref, spec, spec_bytes(spec))
            self.fetched += len(missing)
        return [
            job if ref is None else dataclasses.replace(job, stdio=specs[ref])
            for job, ref in zip(jobs, refs)
        ]
