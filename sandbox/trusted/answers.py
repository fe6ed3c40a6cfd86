"""Compare a program's stdout with a problem's answer file, as a contest judge does.

The semantics are those of the Kattis **default output validator** (problemtools'
``support/default_validator/default_validator.cc``), with the flags of ``problem.yaml``
(``validator_flags``) and ``testdata.yaml`` (``output_validator_flags``):

- Tokens are maximal runs of bytes that are not C ``isspace`` (space, ``\\t \\n \\v \\f \\r``);
  every other byte, NUL and invalid UTF-8 included, is part of a token. They are compared in
  order; the output must end when the answer does.
- Whitespace is not compared, unless ``space_change_sensitive``: then the output's must be the
  answer's, byte for byte (a missing final newline fails). Letters compare ignoring ASCII case
  unless ``case_sensitive``.
- ``float_absolute_tolerance E``, ``float_relative_tolerance E``, ``float_tolerance E`` (both);
  a later flag overrides an earlier one. With a tolerance, an answer token that is a number
  needs an output token that is a number with ``|a - o| <= abs_tol`` or ``<= rel_tol * |a|``.
  A number is what ``sscanf("%lf%10s")`` reads whole: decimal or hexadecimal, integers
  included (``2.0e2`` matches ``200``); ``inf``, ``nan`` and what overflows (``1e999``) compare
  as strings. Without a tolerance every token is a string (``1.0`` does not match ``1.00``).

Three deliberate differences, each stricter than the C program:

- A token is compared whole: ``strcmp`` stops at a NUL, so the validator takes ``42\\0junk``
  for ``42``.
- A dangling exponent (``1e``, ``1e+``, ``0x1p``) is not a number; glibc before 2.36 reads it
  as the number before it, the C standard does not.
- With a tolerance, an output token is read up to :data:`FLOAT_TOKEN_LIMIT` bytes (every
  double's exact decimal expansion fits): a longer one facing a number is not a number.

Both sides are iterables of byte chunks cut anywhere, each read once: memory is O(chunk size +
longest answer token). The message names the first difference as the validator's does.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

from common.answer_flags import AnswerFlags, parse_number

__all__ = [
    "AnswerComparison",
    "AnswerFlags",
    "aligned",
    "compare_bytes",
    "compare_streams",
    "parse_number",
]

CHUNK_SIZE = 64 * 1024
#: The longest output token read as a number (the exact expansion of a double is ~1,100 bytes).
FLOAT_TOKEN_LIMIT = 4096

_WHITESPACE = b" \t\n\r\x0b\x0c"
_SPACE_RUN = re.compile(rb"[ \t\n\r\x0b\x0c]*")
_TOKEN_RUN = re.compile(rb"[^ \t\n\r\x0b\x0c]*")
_TOKEN_FIND = re.compile(rb"[^ \t\n\r\x0b\x0c]+")
# Whitespace -> " ", any other byte -> "x": a token ends where "x " occurs.
_CLASSES = bytes(0x20 if b in _WHITESPACE else 0x78 for b in range(256))
BATCH_SIZE = 8192  # bytes split into tokens at once
_PROBE = 32  # the first bytes compared before looking for a longer shared run
_SHOW = 30  # bytes of a token shown in a message (as problemtools: 30, +5 before cutting)


@dataclass(frozen=True)
class AnswerComparison:
    """The verdict: accepted, or the first difference. ``token`` is the 1-based index of the
    token where output and answer first differ (whitespace errors: the token after it; trailing
    output: one past the answer's last); lines are 1-based. All three are None when accepted."""

    accepted: bool
    message: str
    token: int | None = None
    output_line: int | None = None
    answer_line: int | None = None


class _Reader:
    """One stream of chunks, read forward: the current chunk, a position in it, the line."""

    __slots__ = ("_chunks", "_ended", "base", "buf", "line", "pos")

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)
        self._ended = False
        self.buf, self.pos, self.base, self.line = b"", 0, 0, 1

    def fill(self) -> bool:
        """Whether a byte is ready at ``buf[pos]`` (False: the stream has ended)."""
        while self.pos >= len(self.buf):
            chunk = None if self._ended else next(self._chunks, None)
            if chunk is None:
                self._ended = True
                return False
            self.base += len(self.buf)
            self.buf, self.pos = (chunk if type(chunk) is bytes else bytes(chunk)), 0
        return True

    @property
    def offset(self) -> int:
        return self.base + self.pos

    def peek(self) -> int | None:
        return self.buf[self.pos] if self.fill() else None

    def skip_space(self) -> None:
        while self.fill():
            end = _SPACE_RUN.match(self.buf, self.pos).end()
            self.line += self.buf.count(b"\n", self.pos, end)
            self.pos = end
            if end < len(self.buf):
                return

    def take_space(self, most: int) -> bytes:
        """Up to ``most`` whitespace bytes; empty only when a token or the end comes next."""
        if not self.fill():
            return b""
        stop = min(len(self.buf), self.pos + most)
        end = _SPACE_RUN.match(self.buf, self.pos, stop).end()
        run = self.buf[self.pos : end]
        self.line += run.count(b"\n")
        self.pos = end
        return run

    def take_token(self, most: int | None = None) -> tuple[bytes, bool] | None:
        """The token starting here (None at the end): its first ``most`` bytes (all of it when
        None) and whether it goes on past them, unread."""
        pieces: list[bytes] = []
        size = 0
        while self.fill():
            room = len(self.buf) if most is None else min(len(self.buf), self.pos + most - size)
            end = _TOKEN_RUN.match(self.buf, self.pos, room).end()
            pieces.append(self.buf[self.pos : end])
            size += end - self.pos
            self.pos = end
            if most is not None and size >= most:
                nxt = self.peek()
                return b"".join(pieces), nxt is not None and nxt not in _WHITESPACE
            if end < len(self.buf):
                break
        return (b"".join(pieces), False) if pieces else None


class _Tokens:
    """One stream's tokens for the whitespace-insensitive default: the current chunk split at C
    speed, up to BATCH_SIZE bytes at a time, to its last whitespace byte; a token running into
    the next chunk is read alone. Lines are found again only for a message."""

    __slots__ = ("at", "batch", "line0", "reader", "region")

    def __init__(self, reader: _Reader) -> None:
        self.reader, self.batch, self.at, self.region, self.line0 = reader, [], 0, b"", 1

    @property
    def drained(self) -> bool:
        return self.at == len(self.batch)

    def take(self, most: int | None = None) -> tuple[bytes, bool] | None:
        """The next token as :meth:`_Reader.take_token` gives it (a split one whole: the caller
        cuts it to ``most``)."""
        if self.at < len(self.batch):
            self.at += 1
            return self.batch[self.at - 1], False
        reader = self.reader
        reader.skip_space()
        if not reader.fill():
            return None
        buf, pos = reader.buf, reader.pos
        self.line0 = reader.line
        cut = max(buf.rfind(space, pos, pos + BATCH_SIZE) for space in _WHITESPACE) + 1
        if cut <= pos:
            self.batch, self.at, self.region = [], 0, b""
            return reader.take_token(most)
        self.region = buf[pos:cut]
        self.batch, self.at = self.region.split(), 1
        reader.pos, reader.line = cut, reader.line + self.region.count(b"\n")
        return self.batch[0], False

    def line(self) -> int:
        """The line on which the last token taken starts."""
        if not self.batch:
            return self.line0
        starts = _TOKEN_FIND.finditer(self.region)
        start = next(m.start() for k, m in enumerate(starts) if k == self.at - 1)
        return self.line0 + self.region.count(b"\n", 0, start)


def _skip_shared(ans: _Reader, out: _Reader) -> int:
    """Skip, in both streams, the bytes they share from here up to the last whitespace byte of
    that run (tokens ending in it are equal whatever the flags); the number of tokens skipped.
    Only within the current chunks, at the start of a token step."""
    if not (ans.fill() and out.fill()):
        return 0
    a, i, o, j = ans.buf, ans.pos, out.buf, out.pos
    room = min(len(a) - i, len(o) - j)
    size, step = 0, _PROBE
    while size < room:
        n = min(step, room - size)
        if a[i + size : i + size + n] != o[j + size : j + size + n]:
            break
        size, step = size + n, step * 2
    cut = max(a.rfind(space, i, i + size) for space in _WHITESPACE) + 1
    if cut <= i:
        return 0
    shared = a[i:cut]
    newlines = shared.count(b"\n")
    ans.pos, ans.line = cut, ans.line + newlines
    out.pos, out.line = j + cut - i, out.line + newlines
    return shared.translate(_CLASSES).count(b"x ")


def _show(token: bytes, more: bool = False, limit: int = _SHOW) -> str:
    """A token for a message: at most ``limit`` bytes (+5 before cutting, and the rest of a
    UTF-8 character), decoded with escapes for invalid UTF-8 and unprintable characters."""
    if more or len(token) > limit + 5:
        cut = limit
        while cut < min(len(token), limit + 3) and token[cut] & 0xC0 == 0x80:
            cut += 1
        token, more = token[:cut], True
    text = token.decode("utf-8", "backslashreplace")
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text + "..." if more else text


def _show_pair(expected: bytes, got: bytes, more: bool) -> tuple[str, str]:
    """Both tokens cut as problemtools does: a little of their common prefix, then a little of
    each from the first byte where they differ."""
    same = 0
    while same < min(len(expected), len(got)):
        block = min(4096, len(expected) - same, len(got) - same)
        if expected[same : same + block] == got[same : same + block]:
            same += block
            continue
        while expected[same] == got[same]:
            same += 1
        break
    prefix = _show(expected[:same], limit=15) if same else ""
    return prefix + _show(expected[same:], limit=15), prefix + _show(got[same:], more, limit=15)


def _show_byte(byte: int | None) -> str:
    if byte is None:
        return "the end"
    return repr(chr(byte)) if byte < 0x80 else f"'\\x{byte:02x}'"


def _number_difference(expected: bytes, got: bytes, more: bool, flags: AnswerFlags) -> str | None:
    """What is wrong with ``got`` for an answer token that is a number (None: within tolerance)."""
    value = parse_number(expected)
    assert value is not None
    number = None if more else parse_number(got)
    if number is None:
        return f'expected a number near "{_show(expected)}", got "{_show(got, more)}"'
    error = abs(value - number)
    absolute, relative = flags.float_absolute_tolerance, flags.float_relative_tolerance
    if (absolute is not None and error <= absolute) or (
        relative is not None and error <= relative * abs(value)
    ):
        return None
    ratio = f"{error / abs(value):.3g}" if value else "undefined (the answer is 0)"
    return (
        f'expected "{_show(expected)}", got "{_show(got)}": absolute error {error:.3g}, '
        f"relative error {ratio} (tolerance: absolute {_tolerance(absolute)}, "
        f"relative {_tolerance(relative)})"
    )


def _tolerance(value: float | None) -> str:
    return "none" if value is None else f"{value:g}"


def _token_difference(expected: bytes, got: bytes, more: bool, flags: AnswerFlags) -> str | None:
    """What is wrong with output token ``got`` (``more``: longer than read) for answer token
    ``expected``; None when they match."""
    if flags.uses_floats and parse_number(expected) is not None:
        return _number_difference(expected, got, more, flags)
    same_length = not more and len(got) == len(expected)
    if same_length and (
        got == expected or (not flags.case_sensitive and got.lower() == expected.lower())
    ):
        return None
    shown_expected, shown_got = _show_pair(expected, got, more)
    return f'expected "{shown_expected}", got "{shown_got}"'


def _wrong(
    what: str, token: int, lines: tuple[int, int], spacing: bool = False
) -> AnswerComparison:
    """Wrong answer at 1-based ``token`` (``spacing``: in the whitespace before it)."""
    place = f"at token {token}"
    if spacing:
        place = f"after token {token - 1}" if token > 1 else "before the first token"
    where = f"line {lines[0]} of the output, line {lines[1]} of the answer"
    return AnswerComparison(False, f"Wrong answer {place} ({where}): {what}", token, *lines)


def _match_space(ans: _Reader, out: _Reader, token: int) -> AnswerComparison | None:
    """space_change_sensitive: the output's whitespace here must be the answer's, byte for byte
    (both runs consumed when it is). The first difference, or None."""
    while run := ans.take_space(CHUNK_SIZE):
        done = 0
        while done < len(run):
            got = out.take_space(len(run) - done)
            if got and got == run[done : done + len(got)]:
                done += len(got)
                continue
            at = next((k for k in range(len(got)) if got[k] != run[done + k]), len(got))
            byte = got[at] if got else out.peek()
            lines = (out.line - got[at:].count(b"\n"), ans.line - run[done + at :].count(b"\n"))
            what = f"whitespace differs: expected {_show_byte(run[done + at])}, got "
            return _wrong(what + _show_byte(byte), token + 1, lines, spacing=True)
    extra = out.take_space(1)
    if not extra:
        return None
    where = "after the answer's last token" if ans.peek() is None else "where the answer has none"
    lines = (out.line - extra.count(b"\n"), ans.line)
    what = f"extra whitespace {_show_byte(extra[0])} {where}"
    return _wrong(what, token + 1, lines, spacing=True)


def _ended_early(
    expected: bytes, token: int, out: _Reader, lines: tuple[int, int]
) -> AnswerComparison:
    what = "ended" if token > 1 else "is empty" if out.offset == 0 else "holds only whitespace"
    return _wrong(f'the output {what}; expected "{_show(expected)}"', token, lines)


def _most(expected: bytes, flags: AnswerFlags) -> int:
    """The bytes of the output token read against ``expected``: one more decides a string."""
    return max(len(expected) + 1, FLOAT_TOKEN_LIMIT if flags.uses_floats else 0)


def _compare_spaced(ans: _Reader, out: _Reader, flags: AnswerFlags) -> AnswerComparison:
    """space_change_sensitive: whitespace byte by byte, then each token."""
    token = 0
    while True:
        token += _skip_shared(ans, out)
        if failure := _match_space(ans, out, token):
            return failure
        taken = ans.take_token()
        if taken is None:
            break
        expected, token = taken[0], token + 1
        got = out.take_token(_most(expected, flags))
        if got is None:
            return _ended_early(expected, token, out, (out.line, ans.line))
        if what := _token_difference(expected, got[0], got[1], flags):
            return _wrong(what, token, (out.line, ans.line))
    return _finish(token, out.take_token(_SHOW + 6), out.line, ans.line)


def _compare_loose(ans: _Reader, out: _Reader, flags: AnswerFlags) -> AnswerComparison:
    """The default: whitespace only separates; tokens from whole chunks split at once."""
    answers, outputs = _Tokens(ans), _Tokens(out)
    token, least = 0, _most(b"", flags)
    while True:
        if answers.drained and outputs.drained:
            while skipped := _skip_shared(ans, out):  # again when it reached a chunk's end
                token += skipped
        taken = answers.take()
        if taken is None:
            break
        expected, token = taken[0], token + 1
        most = max(len(expected) + 1, least)
        got = outputs.take(most)
        if got is None:
            return _ended_early(expected, token, out, (out.line, answers.line()))
        text, more = got
        if len(text) > most:
            text, more = text[:most], True
        if text == expected and not more:
            continue
        if what := _token_difference(expected, text, more, flags):
            return _wrong(what, token, (outputs.line(), answers.line()))
    extra = outputs.take(_SHOW + 6)
    return _finish(token, extra, outputs.line() if extra else out.line, ans.line)


def _finish(
    token: int, extra: tuple[bytes, bool] | None, out_line: int, ans_line: int
) -> AnswerComparison:
    """Accepted, unless the output goes on past the answer's last token."""
    if extra is None:
        return AnswerComparison(True, f"Accepted ({token} tokens)")
    text, more = extra[0][: _SHOW + 6], extra[1] or len(extra[0]) > _SHOW + 6
    return _wrong(f'trailing output "{_show(text, more)}"', token + 1, (out_line, ans_line))


def compare_streams(
    output: Iterable[bytes], answer: Iterable[bytes], flags: AnswerFlags | None = None
) -> AnswerComparison:
    """Judge ``output`` (the program's stdout) against ``answer`` (the ``.ans`` file), both
    iterables of byte chunks cut anywhere; reads each once, holding a chunk and a token."""
    flags = flags or AnswerFlags()
    out, ans = _Reader(output), _Reader(answer)
    if flags.space_change_sensitive:
        return _compare_spaced(ans, out, flags)
    return _compare_loose(ans, out, flags)


def compare_bytes(
    output: bytes, answer: bytes, flags: AnswerFlags | None = None, chunk_size: int = CHUNK_SIZE
) -> AnswerComparison:
    """:func:`compare_streams` on two byte strings, cut into ``chunk_size`` chunks."""
    return compare_streams(aligned((output,), chunk_size), aligned((answer,), chunk_size), flags)


def aligned(chunks: Iterable[bytes], size: int = CHUNK_SIZE) -> Iterator[bytes]:
    """``chunks`` cut again at every multiple of ``size`` bytes (holding at most ``size``): two
    streams cut at the same offsets let the comparison skip the runs they share at C speed,
    which it does only within chunks (docs/benchmarks.md, stdin/stdout section)."""
    pending: list[bytes] = []
    held = 0
    for chunk in chunks:
        view = memoryview(chunk)
        while view:
            piece = view[: size - held]
            pending.append(bytes(piece))
            held += len(piece)
            view = view[len(piece) :]
            if held == size:
                yield b"".join(pending)
                pending, held = [], 0
    if pending:
        yield b"".join(pending)


def read_chunks(stream: BinaryIO, size: int = CHUNK_SIZE) -> Iterator[bytes]:
    """A binary file's bytes as chunks of ``size``, for :func:`compare_streams`."""
    while chunk := stream.read(size):
        yield chunk
