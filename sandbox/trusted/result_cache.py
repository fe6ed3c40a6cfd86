"""Result cache: GRPO samples the same completion more than once, and retries are common.

Keyed by a hash of everything that decides the result (program, tests, setup code, a whole
program's tests and limits, and the stop flag); bounded, least recently used entries are
dropped first.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from collections import OrderedDict
from collections.abc import Hashable
from pathlib import Path
from typing import Any

from common.types import ExecutionJob, ExecutionResult, StdioSpec


def job_key(job: ExecutionJob, stop_at_first_failure: bool) -> str:
    stdio = stdio_digest(job.stdio) if job.stdio is not None else ""
    fields = [job.code, list(job.tests), job.setup_code, stop_at_first_failure, stdio, job.language]
    payload = json.dumps(fields)
    return hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()


@functools.lru_cache(maxsize=4096)
def stdio_digest(spec: StdioSpec) -> str:
    """A digest of a whole program's tests, limits and validator (computed once per spec: a
    group's completions share their problem's). A file counts by its path, size and
    modification time when first seen: a file changed in a run is not seen again."""
    digest = hashlib.sha256(repr((spec.time_limit_s, spec.memory_mb, spec.output_mb)).encode())
    if spec.validator is not None:  # its sources: a changed validator judges anew
        digest.update(repr(spec.validator).encode("utf-8", "surrogatepass"))
    for test in spec.tests:
        digest.update(repr((test.name, test.group, test.flags)).encode("utf-8", "surrogatepass"))
        for data in (test.input, test.answer):
            if isinstance(data, Path):  # as it was when the problem was first judged
                try:
                    stat = data.stat()
                    data = repr((str(data), stat.st_size, stat.st_mtime_ns)).encode()
                except OSError:  # judging says so (infra_error); the key needs none of it
                    data = repr((str(data), None)).encode()
            digest.update(len(data).to_bytes(8, "little") + data)
    return digest.hexdigest()


class Lru:
    """A map that drops its least recently used entries while their sizes add up to more than
    ``most`` (the last entry always stays)."""

    def __init__(self, most: int) -> None:
        self.most, self.held = most, 0
        self.entries: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()

    def get(self, key: Hashable) -> Any | None:
        entry = self.entries.get(key)
        if entry is None:
            return None
        self.entries.move_to_end(key)
        return entry[0]

    def put(self, key: Hashable, value: Any, size: int = 1) -> None:
        self.held += size - self.entries.pop(key, (None, 0))[1]
        self.entries[key] = (value, size)
        while self.held > self.most and len(self.entries) > 1:
            _, (_, dropped) = self.entries.popitem(last=False)
            self.held -= dropped


class ResultCache:
    """A bounded LRU map from job key to result; stored and returned as copies."""

    def __init__(self, max_entries: int = 100_000) -> None:
        self._entries = Lru(max_entries)

    def get(self, key: str) -> ExecutionResult | None:
        result = self._entries.get(key)
        return None if result is None else _copy(result)

    def put(self, key: str, result: ExecutionResult) -> None:
        self._entries.put(key, _copy(result))


def _copy(result: ExecutionResult) -> ExecutionResult:
    return dataclasses.replace(result, test_verdicts=list(result.test_verdicts))
