"""Whole programs' tests by reference: each problem's tests travel to the pool's node once.

A contest problem's tests can be megabytes, and a run judges the same problem again and again
(a group's G samples, every epoch). So the driver's ``SandboxClient`` puts a spec into Ray's
object store once (:class:`SpecRefs`) and sends jobs with its reference; the pool
(:class:`SpecStore`) fetches a reference it has not seen once and keeps the spec. An object
lives as long as the driver holds its reference, so a pool that Ray restarted fetches again
what it needs. Both sides are bounded by the bytes they hold; the key is the spec itself (a
frozen dataclass: equal specs share an entry).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common.types import ExecutionJob, StdioSpec
from sandbox.trusted.result_cache import Lru

HELD_BYTES = 1 << 30  # each side's bound: a few hundred typical contest problems' tests


def spec_bytes(spec: StdioSpec) -> int:
    """The bytes a spec holds: its inline inputs and answers (a file counts as its path)."""
    return sum(len(data) if isinstance(data, bytes) else len(str(data)) for data in _data(spec))


def _data(spec: StdioSpec) -> list[bytes | Path]:
    return [data for test in spec.tests for data in (test.input, test.answer)]


class SpecRefs:
    """The client's side: one object-store reference per spec, put on first use."""

    def __init__(self, put: Callable[[StdioSpec], Any], max_bytes: int = HELD_BYTES) -> None:
        self._put = put
        self._refs = Lru(max_bytes)

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
        self._specs = Lru(max_bytes)
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
