"""sandbox/trusted/answers.py, streamed: every chunking gives one result, the stream agrees with
the Kattis default output validator's loop (``_reference``: a byte-by-byte transcription of
``default_validator.cc`` on whole byte strings, Kattis/problemtools 8f733ef), a 50 MB answer is
compared in bounded memory, and real Kick Start answers judge as they should.
"""

from __future__ import annotations

import gc
import io
import random
import re
import sys
import time
import tracemalloc
from collections.abc import Iterable, Iterator
from itertools import chain, repeat
from pathlib import Path

import pytest

from sandbox.trusted.answers import (
    BATCH_SIZE,
    CHUNK_SIZE,
    AnswerComparison,
    AnswerFlags,
    compare_bytes,
    compare_streams,
    parse_number,
    read_chunks,
)
from tests.conftest import REPO_ROOT
from tests.unit.sandbox.trusted.answer_helpers import CASE, DEFAULT, SPACE, TOL, cut, random_cut

DATA = REPO_ROOT.parent / "shared" / "data"
KICKSTART = DATA / "codejam" / "kickstart"


# -- streaming --------------------------------------------------------------------------------

CHUNKING_CASES = [
    (b"Case #1: 3\nCase #2: 5\n", b"Case #1: 3\nCase #2: 5\n", DEFAULT),
    (b"Case #1: 5\nCase #2: 3\n", b"Case #1: 3\nCase #2: 5\n", DEFAULT),
    (b"Case  #1:\t3\r\nCase #2: 5", b"Case #1: 3\nCase #2: 5\n", DEFAULT),
    (b"Case  #1:\t3\r\nCase #2: 5", b"Case #1: 3\nCase #2: 5\n", SPACE),
    (b"Case #1: 3\nCase #2: 5\n", b"Case #1: 3\nCase #2:  5\n", SPACE),
    (b"CASE #1: 0.33333334\n", b"Case #1: 0.333333333\n", TOL),
    (b"Case #1: 0.3334\n", b"Case #1: 0.333333333\n", TOL),
    (b"abcdefghij" * 10 + b" tail", b"abcdefghij" * 10 + b" tall", CASE),
    (b"x " * 60 + b"y", b"x " * 60, DEFAULT),
    (b"x " * 60, b"x " * 60 + b"y", DEFAULT),
    (b"word " * 50 + b"\n\n", b"word " * 50 + b"\n", SPACE),
    (b"\xff\x00 caf\xe9 " * 20, b"\xff\x00 caf\xe9 " * 19 + b"\xff\x00 cafe ", DEFAULT),
    (b"1 2 3 4 5 6 7 8 9 10 " * 8 + b"1.5", b"1 2 3 4 5 6 7 8 9 10 " * 8 + b"abc", TOL),
]


@pytest.mark.parametrize(("output", "answer", "flags"), CHUNKING_CASES)
def test_every_chunking_gives_the_same_result(output, answer, flags):
    whole = compare_streams([output], [answer], flags)
    longest = max(len(output), len(answer)) + 1
    for size in range(1, longest + 1):
        # misaligned boundaries: the two streams are cut at different places
        other = longest + 1 - size
        assert compare_streams(cut(output, size), cut(answer, other), flags) == whole, size
        assert compare_streams(cut(output, size), cut(answer, size), flags) == whole, size
    rng = random.Random(1234)
    for _ in range(200):
        chunks = random_cut(output, rng), random_cut(answer, rng)
        assert compare_streams(*chunks, flags) == whole
    # empty chunks, bytearrays and memoryviews are chunks too
    odd = [b"", bytearray(output[:3]), b"", memoryview(output[3:])]
    assert compare_streams(odd, iter([answer, b""]), flags) == whole


def _reference(output: bytes, answer: bytes, flags: AnswerFlags):
    """The validator's loop (default_validator.cc, main) transcribed byte by byte:
    (accepted, token, output line, answer line)."""
    space = frozenset(b" \t\n\r\x0b\x0c")
    i = j = 0
    answer_line = output_line = 1
    token = 0
    while True:
        while i < len(answer) and answer[i] in space:
            if flags.space_change_sensitive:
                if j == len(output) or output[j] != answer[i]:
                    return False, token + 1, output_line, answer_line
                output_line += output[j] == ord("\n")
                j += 1
            answer_line += answer[i] == ord("\n")
            i += 1
        while j < len(output) and output[j] in space:
            if flags.space_change_sensitive:
                return False, token + 1, output_line, answer_line
            output_line += output[j] == ord("\n")
            j += 1
        if i == len(answer):
            break
        token += 1
        if j == len(output):
            return False, token, output_line, answer_line
        start = i
        while i < len(answer) and answer[i] not in space:
            i += 1
        judge = answer[start:i]
        start = j
        while j < len(output) and output[j] not in space:
            j += 1
        team = output[start:j]
        jval = parse_number(judge) if flags.uses_floats else None
        if jval is not None:
            tval = parse_number(team)
            abs_tol = flags.float_absolute_tolerance
            rel_tol = flags.float_relative_tolerance
            ok = tval is not None and (
                (abs_tol is not None and abs(jval - tval) <= abs_tol)
                or (rel_tol is not None and abs(jval - tval) <= rel_tol * abs(jval))
            )
        elif flags.case_sensitive:
            ok = judge == team
        else:
            ok = judge.lower() == team.lower()
        if not ok:
            return False, token, output_line, answer_line
    if j < len(output):
        return False, token + 1, output_line, answer_line
    return True, None, None, None


_TOKENS = [
    b"1", b"1.0", b"1.0000001", b"2", b"-0", b"0x1p1", b"1e", b"abc", b"ABC", b"Case", b"#1:",
    b"\x00", b"\xff", b"nan", b"inf", b"1e999", b"0.5", b".5", b"5.", b"0", b"1000000",
]  # fmt: skip
_SPACES = [b" ", b"\n", b"\t", b"\r\n", b"  ", b"\x0b", b"\x0c", b" \n"]


def _random_answer(rng: random.Random) -> list[bytes]:
    parts = [rng.choice(_SPACES)] if rng.random() < 0.2 else []
    for _ in range(rng.randint(0, 40)):
        parts += [rng.choice(_TOKENS), rng.choice(_SPACES[:2])]
    return parts


def _mutate(parts: list[bytes], rng: random.Random) -> list[bytes]:
    parts = list(parts)
    for _ in range(rng.choice([0, 0, 1, 1, 2])):
        at = rng.randrange(len(parts) + 1)
        kind = rng.randrange(6)
        if kind == 0 and parts:
            del parts[min(at, len(parts) - 1)]
        elif kind == 1:
            parts.insert(at, rng.choice(_TOKENS + _SPACES))
        elif kind == 2 and len(parts) > 2:
            a, b = rng.sample(range(len(parts)), 2)
            parts[a], parts[b] = parts[b], parts[a]
        elif kind == 3 and parts:
            k = min(at, len(parts) - 1)
            parts[k] = parts[k].upper() if rng.random() < 0.5 else parts[k].lower()
        elif kind == 4 and parts:
            parts[min(at, len(parts) - 1)] = rng.choice(_SPACES)
        elif kind == 5:
            parts.append(rng.choice(_SPACES))
    return parts


def test_the_stream_agrees_with_the_validators_loop_on_random_cases():
    rng = random.Random(20261206)
    flag_sets = [
        DEFAULT,
        SPACE,
        CASE,
        TOL,
        AnswerFlags.parse("float_absolute_tolerance 1e-3 space_change_sensitive"),
        AnswerFlags.parse("float_relative_tolerance 1e-6 case_sensitive"),
    ]
    outcomes = set()
    for _ in range(3000):
        parts = _random_answer(rng)
        answer, output = b"".join(parts), b"".join(_mutate(parts, rng))
        flags = rng.choice(flag_sets)
        chunked = compare_streams(random_cut(output, rng), random_cut(answer, rng), flags)
        got = (chunked.accepted, chunked.token, chunked.output_line, chunked.answer_line)
        assert got == _reference(output, answer, flags), (output, answer, flags)
        outcomes.add(chunked.accepted)
    assert outcomes == {True, False}


def test_long_streams_agree_with_the_validators_loop_whatever_the_chunk_sizes():
    """Streams long enough for every path: shared runs skipped, chunks split in batches, tokens
    running across chunks, a difference anywhere."""
    rng = random.Random(7)
    sizes = [1, 3, 64, 1000, 4096, BATCH_SIZE + 1, CHUNK_SIZE]
    for _ in range(40):
        parts = [part for _ in range(150) for part in _random_answer(rng)]
        answer = b"".join(parts)
        output = b"".join(_mutate(parts, rng)) if rng.random() < 0.7 else answer
        flags = rng.choice([DEFAULT, SPACE, TOL, CASE])
        expected = _reference(output, answer, flags)
        whole = compare_streams([output], [answer], flags)
        assert (whole.accepted, whole.token, whole.output_line, whole.answer_line) == expected
        for _ in range(3):
            size, other = rng.choice(sizes), rng.choice(sizes)
            assert compare_streams(cut(output, size), cut(answer, other), flags) == whole


def test_read_chunks_reads_a_file_in_chunks():
    data = b"Case #1: 3\n" * 1000
    assert list(read_chunks(io.BytesIO(data), 4096)) == list(cut(data, 4096))
    assert compare_streams(read_chunks(io.BytesIO(data), 7), [data]).accepted


# -- memory: a 50 MB answer in 64 KiB chunks ---------------------------------------------------

_BLOCK = b"".join(b"Case #%d: %d 0.%06d\n" % (i, i * i, i * 7919 % 1000000) for i in range(160))
_LONGEST = max(len(token) for token in _BLOCK.split())
_SIZE = 50 * 1000 * 1000


def _rechunk(pieces: Iterable[bytes], size: int) -> Iterator[bytes]:
    """Pieces re-cut into chunks of exactly ``size`` bytes (the last shorter)."""
    buffer = bytearray()
    for piece in pieces:
        buffer += piece
        while len(buffer) >= size:
            yield bytes(buffer[:size])
            del buffer[:size]
    if buffer:
        yield bytes(buffer)


def _large(ending: bytes, block: bytes = _BLOCK) -> Iterator[bytes]:
    """~50 MB: ``block`` repeated, then ``ending``, made as it is read, in 64 KiB chunks."""
    repeats = _SIZE // len(block)
    return _rechunk(chain(repeat(block, repeats), [ending]), CHUNK_SIZE)


def _peak(run) -> tuple[object, int]:
    gc.collect()
    tracemalloc.start()
    try:
        result = run()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# What can be alive at once while a stream is compared. Per stream: the generator's buffer (a
# chunk + one piece), the slice of it it copies and the chunk it yields, and the reader's
# current chunk: 4 chunks + a piece. For both: a shared run's probes, or its copy and that
# copy's translation (2 chunks). Per stream, a token as pieces and joined (the answer's whole,
# the output's up to its length + 1), or a batch: BATCH_SIZE bytes split into at most
# BATCH_SIZE / 2 tokens (a bytes object and a list slot each) and the copy they were split
# from. Plus a fixed allowance for the interpreter's own small objects (frames, regex matches,
# the generators).
_TOKENS_OF_A_BATCH = BATCH_SIZE // 2 * (sys.getsizeof(b"x") + 8) + BATCH_SIZE
_BOUND = (
    2 * (4 * CHUNK_SIZE + len(_BLOCK))
    + 2 * CHUNK_SIZE
    + 2 * max(2 * (_LONGEST + 1), _TOKENS_OF_A_BATCH)
)
_SLACK = 256 * 1024


def test_a_50_mb_answer_is_compared_in_bounded_memory():
    repeats = _SIZE // len(_BLOCK)
    tokens, lines = repeats * len(_BLOCK.split()), repeats * _BLOCK.count(b"\n")
    assert _BOUND + _SLACK < _SIZE // 20

    started = time.perf_counter()
    same, peak = _peak(lambda: compare_streams(_large(b"Case #0: 42\n"), _large(b"Case #0: 42\n")))
    # shared runs are skipped at C speed: ~1 s here under tracemalloc, ~5 min token by token
    assert time.perf_counter() - started < 60
    assert same == AnswerComparison(True, f"Accepted ({tokens + 3} tokens)")
    assert peak < _BOUND + _SLACK, (peak, _BOUND)

    last, peak = _peak(lambda: compare_streams(_large(b"Case #0: 43\n"), _large(b"Case #0: 42\n")))
    assert (last.accepted, last.token, last.output_line) == (False, tokens + 3, lines + 1)
    assert peak < _BOUND + _SLACK, (peak, _BOUND)


def test_token_by_token_comparison_is_bounded_too():
    """Whitespace that differs everywhere: no shared runs to skip, every token read and
    compared alone (a fiftieth of the size: the bound does not depend on it)."""
    loose = _BLOCK.replace(b"\n", b" \r\n")
    repeats = _SIZE // 50 // len(_BLOCK)

    def run() -> AnswerComparison:
        output = _rechunk(repeat(loose, repeats), CHUNK_SIZE)
        return compare_streams(output, _rechunk(repeat(_BLOCK, repeats), CHUNK_SIZE), TOL)

    result, peak = _peak(run)
    assert result.accepted, result
    assert peak < _BOUND + _SLACK, (peak, _BOUND)


# -- Kick Start answers ------------------------------------------------------------------------


def _kickstart_packages() -> list[Path]:
    if not KICKSTART.is_dir():
        return []
    packages = sorted(p.parent for p in KICKSTART.glob("*/*/*/problem.yaml"))
    return packages[:: max(1, len(packages) // 6)][:6]


def _flags(package: Path) -> AnswerFlags:
    text = (package / "problem.yaml").read_text()
    match = re.search(r"^output_validator_flags:\s*(.*)$", text, re.M)
    return AnswerFlags.parse(match.group(1) if match else "")


@pytest.mark.skipif(not KICKSTART.is_dir(), reason="../shared/data/codejam/kickstart not present")
@pytest.mark.parametrize("package", _kickstart_packages(), ids=lambda p: p.name)
def test_kick_start_answers(package):
    flags = _flags(package)
    assert flags.uses_floats  # every package here has a float_tolerance
    answers = sorted(package.glob("data/**/*.ans"))
    assert answers
    for path in answers:
        answer = path.read_bytes()
        assert compare_bytes(answer, answer, flags, chunk_size=4096).accepted, path

        tokens = answer.split()
        shortened = answer[: answer.rstrip().rindex(tokens[-1])]
        result = compare_bytes(shortened, answer, flags)
        assert (result.accepted, result.token) == (False, len(tokens)), path

        lines = answer.splitlines(keepends=True)
        differ = [k for k in range(1, len(lines)) if lines[k].split() != lines[0].split()]
        if differ:  # "Case #1: ..." and "Case #x: ..." always differ, in their case number
            swapped = [lines[differ[0]], *lines[1 : differ[0]], lines[0], *lines[differ[0] + 1 :]]
            result = compare_bytes(b"".join(swapped), answer, flags)
            assert not result.accepted, path

        respaced = b"  " + answer.replace(b" ", b" \t ").replace(b"\n", b"\r\n\n")
        assert compare_bytes(respaced, answer, flags, chunk_size=1000).accepted, path
        strict = AnswerFlags.parse("space_change_sensitive float_tolerance 1e-6")
        assert not compare_bytes(respaced, answer, strict).accepted


def test_kick_start_data_is_present_where_the_tests_expect_it():
    if not DATA.is_dir():
        pytest.skip("../shared/data not present")
    assert len(_kickstart_packages()) >= 3


def test_aligned_cuts_at_the_same_offsets_whatever_the_pieces():
    from sandbox.trusted.answers import aligned

    data = bytes(range(256)) * 1000
    rng = random.Random(5)
    for size in (1, 7, 4096, 65536):
        pieces = list(aligned(random_cut(data, rng), size))
        assert b"".join(pieces) == data
        assert all(len(piece) == size for piece in pieces[:-1]) and 0 < len(pieces[-1]) <= size
    assert list(aligned([], 8)) == [] and list(aligned([b"", b""], 8)) == []
