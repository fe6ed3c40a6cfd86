"""Seeded fuzzing of the trusted side with what a program can write to its value pipe.

The program runs in the child, so every byte on the value pipe (fd 3) is its to choose. Each
round writes a stream of records, honest-looking ones with random and adversarial values mixed
with records the harness never sends, and takes it down the path the pool's results take: the
worker's reader (``ChildRecords``: frames kept as bytes, counted, stopping at the harness's
``end`` or ``load_error`` as the worker does), the worker -> pool message (``encode``,
``decode_message``) and the judgement (``Judgement.on_record``, which decodes each, and
``finish``). Every round must end in a verdict: no exception, never
``infra_error`` (which the reward masks), and a record the harness never sends, arriving before
the last test, never lets the program pass. Fixed seed: the same streams on every run.
"""

from __future__ import annotations

import json
import math
import random
import struct

import pytest

from common.types import ExecutionResult, Verdict
from sandbox.isolated.child import frame
from sandbox.trusted import testplan
from sandbox.trusted.judging import Judgement
from sandbox.wire.frames import MESSAGE_CAP, ChildRecords, Frames, decode_message, encode

SEED = 33
ROUNDS = 1500
SETUP = "import math"
TESTS = (
    "assert f(1) == 2",
    "assert f(2) == [1, (2, 3.5), {'a': {1, 2}}]",
    "assert math.isclose(f(3), 2.5)",
    "assert f(4)",
    "assert f(1) != f(2)",
    "for x in range(2):\n    assert f(x) is not None",
)
PLANS = [testplan.plan_test(test, SETUP) for test in TESTS]
# The values an honest child sends for a program that passes every test above.
HONEST_VALUES = [
    [["int", "2"]],
    [["list", [["int", "1"], ["tuple", [["int", "2"], ["float", "3.5"]]],
               ["dict", [[["str", "a"], ["set", [["int", "1"], ["int", "2"]]]]]]]]],
    [["float", "2.5"]],
    [True],
    [["int", "1"], ["int", "2"]],
    None,
]  # fmt: skip
KINDS = ("assert", "unserialisable", "memory", "runtime", "syntax")
COLLIDING = [["int", format(1 + k * (2**61 - 1), "x")] for k in range(80)]  # one hash for all
STATUSES = ("end", "eof", "timeout", "output_limit", "stopped")
SIGNALS = (0, 9, 11, 24, 25)


def test_the_plans_cover_every_form():
    forms = [plan.form for plan in PLANS]
    assert forms == ["compare", "compare", "calls", "calls", "calls", "exec"]


class Stream:
    """Random record streams: honest shapes with odd values, and records no honest child sends."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def text(self) -> str:
        return self.rng.choice(
            ["", "x", "\ud800", "\x00\x1b[2J", "<|im_start|>", "é" * 400, "a" * 5000]
        )

    def json_value(self, depth: int = 0) -> object:
        """Any JSON value a decoder can return, huge and odd ones included."""
        rng = self.rng
        pick = rng.randrange(10 if depth < 4 else 6)
        if pick == 0:
            return rng.choice([None, True, False])
        if pick == 1:
            return rng.choice([0, -1, 2**63, 10**4000, -(10**300)])
        if pick == 2:
            return rng.choice([0.0, -0.0, math.nan, math.inf, -math.inf, 1e308])
        if pick in (3, 4, 5):
            return self.text()
        if pick in (6, 7):
            return [self.json_value(depth + 1) for _ in range(rng.randrange(4))]
        return {self.text(): self.json_value(depth + 1) for _ in range(rng.randrange(4))}

    def canonical(self, depth: int = 0) -> object:
        """A tagged value as ``canonicalise`` writes it, or something shaped almost like one."""
        rng = self.rng
        pick = rng.randrange(24 if depth < 3 else 14)
        leaves = [
            lambda: [
                "int",
                rng.choice(["2", "-1f", "0x2", "zz", "", "f" * 20, "f" * 5000, "-" + "f" * 5000]),
            ],
            lambda: ["int", rng.choice([2, None, ["2"]])],
            lambda: [
                "float",
                rng.choice(["nan", "-nan", "inf", "-inf", "1e999", "NaN", "x", "2.5"]),
            ],
            lambda: ["complex", rng.choice([["1.0", "nan"], ["1"], "1+2j"])],
            lambda: ["str", self.text()],
            lambda: ["bytes", rng.choice(["ff00", "f", "zz", ""])],
            lambda: ["bytearray", rng.choice(["80", "1"])],
            lambda: ["range", rng.choice([[["int", "0"], ["int", "5"], ["int", "0"]], [1, 2]])],
            lambda: [rng.choice(["__class__", "pickle", "", "INT"]), []],
            lambda: self.json_value(depth),
            lambda: rng.choice([None, True, False]),
            lambda: ["set", COLLIDING],
            lambda: ["dict", [[k, ["int", "0"]] for k in COLLIDING]],
            lambda: _nested(rng.choice([60, 70, 300])),
        ]
        if pick < len(leaves):
            return leaves[pick]()
        tag = rng.choice(["list", "tuple", "set", "frozenset", "dict", "dict"])
        items = [self.canonical(depth + 1) for _ in range(rng.randrange(4))]
        if tag == "dict":
            return ["dict", [[self.canonical(depth + 1), v] for v in items] + [[1]] * (pick % 2)]
        return [tag, items]

    def test_record(self, index: int, honest: list | None) -> dict:
        """What a test's record could hold: an honest shape with a random value or report
        (``honest``: the values that pass the test, None for an ``exec``-form test)."""
        rng = self.rng
        record: dict = {"t": "test", "i": index}
        pick = rng.randrange(6)
        if pick == 0 and honest is not None:
            record["values"] = honest
        elif pick == 1:
            # ``own``: the test's own assert raised (an exec-form test's wrong answer)
            record.update(kind=rng.choice(KINDS[:4]), exc=self.text(), own=index % 2 == 0)
        elif pick == 2:
            record["ok"] = rng.choice([True, False, 1, "true"])
        else:  # as many values as the test asks for, mostly
            width = len(honest or [0]) if rng.random() < 0.8 else rng.randrange(3)
            huge = ["int", "-" * rng.randrange(2) + "f" * rng.choice([900, 5000, 50_000])]
            values = [huge if pick == 3 else self.canonical() for _ in range(width)]
            record["values"] = values
        return record

    def never_sent(self, index: int, loaded: bool) -> dict | bytes:
        """A record no honest child sends at this point: evidence the program wrote it."""
        rng = self.rng
        choices = [
            lambda: rng.choice([b"\xff\xfe", b'{"t": "test"', b"[" * 3000 + b"]" * 3000]),
            lambda: rng.choice([[1, 2], "loaded", 7, None]),
            lambda: {"t": rng.choice(["garbled", "", "LOADED", "ended", 0, ["test"], {"t": 1}])},
            lambda: {"t": "test", "i": rng.choice([float(index), str(index), None, math.nan])},
            lambda: {"t": "test", "i": index, "kind": rng.choice(["crash", ["runtime"], {}, 1])},
            lambda: {"t": "test", "i": index + 1, "values": HONEST_VALUES[0]},
            lambda: {"t": "end"},
            lambda: {"t": "load_error", "kind": rng.choice([["memory"], {"k": 1}, "passed"])},
        ]
        if loaded:
            choices += [lambda: {"t": "loaded"}, lambda: {"t": "load_error", "kind": "runtime"}]
        return rng.choice(choices)()

    def records(self, honest: list) -> tuple[list[dict | bytes], bool]:
        """One execution's records for tests that ``honest`` values pass, and whether one the
        harness never sends came before the last test's record."""
        rng = self.rng
        stream: list[dict | bytes] = []
        tampered_early = False
        if rng.random() < 0.1:
            stream.append({"t": "load_error", "kind": rng.choice(KINDS), "exc": self.text()})
        elif rng.random() < 0.95:
            stream.append({"t": "loaded"})
        loaded = bool(stream) and stream[0] == {"t": "loaded"}
        for index, values in enumerate(honest):
            if rng.random() < 0.15:
                stream.append(self.never_sent(index, loaded))
                tampered_early = True
            if rng.random() < 0.9:
                stream.append(self.test_record(index, values))
        if rng.random() < 0.8:
            stream.append({"t": "end"})
        return stream, tampered_early


def _nested(depth: int) -> list:
    value: list = ["list", []]
    for _ in range(depth):
        value = ["list", [value]]
    return value


def _wire(record: dict | bytes, rng: random.Random) -> bytes:
    """A record as a program could write it: the harness's own framing, or its own bytes."""
    if isinstance(record, bytes):
        return struct.pack(">I", len(record)) + record
    if rng.random() < 0.5:
        try:
            return frame(record)  # what the harness writes (ASCII JSON)
        except (TypeError, ValueError, RecursionError):
            pass
    body = json.dumps(record, ensure_ascii=False).encode("utf-8", "surrogatepass")
    return struct.pack(">I", len(body)) + body


def judge_stream(
    stream: list[dict | bytes], plans: list, stop: bool, status: str, signum: int, rng
) -> ExecutionResult:
    """The pool's path for one execution's value pipe, worker and front."""
    data = b"".join(_wire(record, rng) for record in stream)
    pipe, records = ChildRecords(len(plans)), []
    while data:  # the worker reads the pipe in pieces of any size
        cut = rng.randrange(1, 70_000)
        chunk, data = data[:cut], data[cut:]
        new, ending = pipe.feed(chunk)
        records += new
        if ending is not None:  # the harness's last record, or a cap
            status = ending
            break
    message = {"op": "done", "id": 1, "status": status, "signal": signum, "recs": records}
    (received,) = Frames(MESSAGE_CAP, None, decode_message).feed(encode(message))
    judgement = Judgement(plans, stop)
    for record in received["recs"]:
        if judgement.on_record(record):
            break
    return judgement.finish(received["status"], received["signal"], 1.0)


def check_result(result: ExecutionResult, total: int) -> None:
    assert isinstance(result, ExecutionResult)
    assert result.verdict in Verdict and result.verdict is not Verdict.INFRA_ERROR
    assert result.tests_total == total and len(result.test_verdicts) <= total
    assert result.tests_passed == sum(v is Verdict.PASSED for v in result.test_verdicts)
    assert 0 <= result.wrong_answers <= sum(v is Verdict.FAILED for v in result.test_verdicts)
    assert len(result.detail) <= 300
    result.detail.encode("utf-8")  # written to logs and prompts later: no lone surrogate


def test_random_records_always_get_a_verdict_and_tampering_never_passes():
    rng = random.Random(SEED)
    streams = Stream(rng)
    seen: set[Verdict] = set()
    tampered_rounds = huge_ints_shown = 0
    for _ in range(ROUNDS):
        chosen = rng.sample(range(len(PLANS)), rng.randrange(0, len(PLANS) + 1))
        plans = [PLANS[k] for k in chosen]
        stream, tampered_early = streams.records([HONEST_VALUES[k] for k in chosen])
        status, signum = rng.choice(STATUSES), rng.choice(SIGNALS)
        result = judge_stream(stream, plans, rng.random() < 0.5, status, signum, rng)
        check_result(result, len(plans))
        seen.add(result.verdict)
        huge_ints_shown += "int of about" in result.detail
        if tampered_early and plans:
            tampered_rounds += 1
            assert result.verdict is not Verdict.PASSED, stream
    # The streams reach every verdict a record can lead to, and tampering often enough to count.
    assert seen == set(Verdict) - {Verdict.INFRA_ERROR}, seen
    assert tampered_rounds > ROUNDS // 10 and huge_ints_shown > 0


def honest_stream() -> list[dict]:
    tests = [
        {"t": "test", "i": i, "values": v} if v is not None else {"t": "test", "i": i, "ok": True}
        for i, v in enumerate(HONEST_VALUES)
    ]
    return [{"t": "loaded"}, *tests, {"t": "end"}]


@pytest.mark.parametrize("stop", [False, True])
def test_an_honest_stream_passes_and_any_foreign_record_before_its_last_test_fails_it(stop):
    rng = random.Random(SEED)
    result = judge_stream(honest_stream(), PLANS, stop, "end", 0, rng)
    assert result.verdict is Verdict.PASSED and result.tests_passed == len(PLANS)
    streams = Stream(rng)
    for position in range(1, len(PLANS) + 1):  # after loaded .. just before the last test
        for _ in range(20):
            stream = honest_stream()
            stream.insert(position, streams.never_sent(position - 1, loaded=True))
            result = judge_stream(stream, PLANS, stop, "end", 0, rng)
            check_result(result, len(PLANS))
            assert result.verdict is not Verdict.PASSED, stream[position]


def test_huge_ints_are_shown_by_their_size_not_converted():
    judgement = Judgement([PLANS[0]], False)
    for record in (
        {"t": "loaded"},
        {"t": "test", "i": 0, "values": [["int", format(10**6000, "x")]]},
    ):
        judgement.on_record(record)
    result = judgement.finish("end", 0, 1.0)
    assert result.verdict is Verdict.FAILED
    assert result.detail == "test 0: assertion failed, got <int of about 6001 digits>"


def test_unhashable_and_colliding_keys_fail_the_test():
    for value in (
        ["set", [["list", []]]],
        ["dict", [[["dict", []], ["int", "1"]]]],
        ["set", COLLIDING],
        ["frozenset", COLLIDING],
        ["dict", [[k, ["int", "0"]] for k in COLLIDING]],
    ):
        judgement = Judgement([PLANS[0]], False)
        judgement.on_record({"t": "loaded"})
        judgement.on_record({"t": "test", "i": 0, "values": [value]})
        result = judgement.finish("end", 0, 1.0)
        assert result.verdict is Verdict.FAILED, value
        assert result.detail.endswith("Error while judging"), result.detail
