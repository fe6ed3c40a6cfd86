"""Programs that flood their value pipe with records, through the real pool (issue 48, item 5):
each ends failed-like (never passed, never ``infra_error``), soon, and the front's and the
worker server's memory stay under the bounds docs/sandbox.md states ("Records" bullet).

``tests/unit/sandbox/test_trusted_bounds.py`` takes the same path without a worker, record by
record; ``test_attacks.py`` has the issue's own flood, written while the program loads.
"""

from __future__ import annotations

import contextlib
import tracemalloc
from pathlib import Path

import pytest

from common.types import Verdict
from tests.unit.sandbox.helpers import GOOD_F, run

FRONT_MiB = 64  # docs/sandbox.md, "Records"
SERVER_MiB = 16
MiB = 1024 * 1024

# Writes ``count`` frames of ``body`` at the first test's call, after the harness's ``loaded``:
# the records arrive where the front expects that test's values.
FLOOD = """
import os, struct
BODY = {body}
def f(x):
    if x == 1:
        frame = struct.pack(">I", len(BODY)) + BODY
        for _ in range({count}):
            view = memoryview(frame)
            while view:
                view = view[os.write(3, view):]
    return x + 1
"""
EMPTY_OBJECTS = 'b\'{"t":"test","i":0,"values":[\' + b",".join([b"{}"] * 690_000) + b"]}"'
# Under the front's check (250k arrays for one value), and the densest such JSON: decoded.
UNDER_THE_CHECK = (
    'b\'{"t":"test","i":0,"values":[\' + b",".join([\'["\\u0100"]\'.encode()] * 249_990)'
    ' + b"," + b",".join([\'"\\U0001f600"\'.encode()] * 49_000) + b"]}"'
)
TINY = "b'{}'"
TEN_TESTS = tuple(f"assert f({i}) == {i + 1}" for i in range(1, 11))

CASES = {
    # 8 records of ~2 MiB (16 MiB, the pipe's cap): past the harness's 4 (loaded, 2 tests, end)
    "empty_objects": (EMPTY_OBJECTS, 8, None),
    # 10 tests let 12 records through: the pipe's 16 MiB cap ends it first
    "empty_objects_many_tests": (EMPTY_OBJECTS, 9, TEN_TESTS),
    "under_the_check": (UNDER_THE_CHECK, 4, TEN_TESTS),
    # a million records of 2 bytes: the fifth ends the execution
    "tiny_records": (TINY, 1_000_000, None),
}
# The front decodes and rebuilds these, ~0.2-0.4 s a record (more under tracemalloc), while
# the server waits to pass it the next: the execution may reach its deadline first.
DECODED = {"under_the_check"}


def _rss_peak_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    return next(int(line.split()[1]) for line in status if line.startswith("VmHWM")) / 1024


def _reset_rss_peak(pid: int) -> None:
    """Start the server's VmHWM afresh where the kernel lets us (``clear_refs`` 5; the owner
    only: an ordinary user's worker may refuse it, and the peak then counts from its start)."""
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid}/clear_refs").write_text("5")


@pytest.mark.parametrize("case", CASES)
def test_a_record_flood_fails_and_the_trusted_side_stays_bounded(pool, case):
    body, count, tests = CASES[case]
    code = FLOOD.format(body=body, count=count)
    assert run(pool, GOOD_F).verdict is Verdict.PASSED
    servers = {w.proc.pid: 0.0 for w in pool._workers}  # the pool has no accessor for them
    for pid in servers:
        _reset_rss_peak(pid)
        servers[pid] = _rss_peak_mib(pid)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        result = run(pool, code, tests=tests) if tests else run(pool, code)
        front = (tracemalloc.get_traced_memory()[1] - before) / MiB
    finally:
        tracemalloc.stop()
    server = max(_rss_peak_mib(pid) - peak for pid, peak in servers.items())
    allowed = {Verdict.FAILED, Verdict.OUTPUT_LIMIT}
    if case in DECODED:
        allowed.add(Verdict.TIMEOUT)
    else:  # ended by a cap, not a deadline (measured: 15-200 ms)
        assert result.duration_ms < 1_000, result
    assert result.verdict in allowed and result.tests_passed < result.tests_total, result
    assert front < FRONT_MiB and server < SERVER_MiB, (front, server)
    assert run(pool, GOOD_F).verdict is Verdict.PASSED
    assert all(w.proc.pid in servers for w in pool._workers)  # no worker was replaced
