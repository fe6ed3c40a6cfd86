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
from pathlib import Path

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


class ResultCache:
    """A bounded LRU map from job key to result; stored and returned as copies."""

    def __init__(self, max_entries: int = 100_000) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[str, ExecutionResult] = OrderedDict()

    def get(self, key: str) -> ExecutionResult | None:
        result = self._entries.get(key)
        if result is None:
            return None
        self._entries.move_to_end(key)
        return dataclasses.replace(result, test_verdicts=list(result.test_verdicts))

    def put(self, key: str, result: ExecutionResult) -> None:
        self._entries[key] = dataclasses.replace(result, test_verdicts=list(result.test_verdicts))
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
