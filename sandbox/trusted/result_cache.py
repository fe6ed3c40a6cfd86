"""Result cache: GRPO samples the same completion more than once, and retries are common.

Keyed by a hash of everything that decides the result (program, tests, setup code and the
stop flag); bounded, least recently used entries are dropped first.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections import OrderedDict

from common.types import ExecutionJob, ExecutionResult


def job_key(job: ExecutionJob, stop_at_first_failure: bool) -> str:
    payload = json.dumps([job.code, list(job.tests), job.setup_code, stop_at_first_failure])
    return hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()


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
