"""Length-prefixed frames (a ``>I`` length, then the body): the child's records (JSON) and the
pool <-> worker messages (``marshal``: both ends are trusted).

The child's records are untrusted input, bounded before anything decodes them: the worker's
server never decodes one (:class:`ChildRecords`), and the front decodes each only as it judges
it, after refusing one that could decode to more than the harness sends (:func:`record`).
docs/sandbox.md, "Records", states the bounds.
"""

from __future__ import annotations

import json
import marshal
import struct
from collections.abc import Callable

FRAME_CAP = 2 * 1024 * 1024  # one record; canonical values are capped below this in the child
VALUE_CAP = 16 * 1024 * 1024  # all records of one execution
FILE_CAP = 16 * 1024 * 1024  # RLIMIT_FSIZE
MESSAGE_CAP = 256 * 1024 * 1024  # one pool <-> worker message (a job, or a result's records)
# Records' bytes a server holds before it sends them on in a ``records`` message (an honest
# execution's travel with ``done``): what it holds stays under this plus one frame and one read.
FLUSH_BYTES = 256 * 1024
# The status of an execution whose child wrote more records than the harness sends: only the
# program could, and it fails (never ``infra_error``).
TOO_MANY_RECORDS = "too_many_records"
# Records up to this size are decoded without :func:`containers` (they hold few containers).
CHECK_BYTES = 64 * 1024
# Bytes asked of one read: below glibc's mmap threshold (128 KiB), so a read buffer is no
# mmap, mremap and munmap each time.
READ_BYTES = 64 * 1024


# One decoder, made once; text, as bytes that are not UTF-8 must raise a ValueError.
_decode = json.JSONDecoder().decode


GARBLED = {"t": "garbled"}  # what a child's frame becomes when it cannot be carried as it is


def encode(message: dict) -> bytes:
    """A pool <-> worker message, framed (``marshal``: trusted on both ends)."""
    data = marshal.dumps(message)
    return struct.pack(">I", len(data)) + data


def decode_record(body: bytearray) -> object:
    """A child's record: JSON text (``marshal`` is not safe to decode from an adversary)."""
    return _decode(body.decode())


def decode_message(body: bytearray) -> object:
    """A pool <-> worker message, as :func:`encode` made it."""
    return marshal.loads(body)


# Bytes of a record split at a time by :func:`containers`, which so holds at most this many
# pieces at once.
_SPLIT_BYTES = 64 * 1024


def containers(body: bytes) -> tuple[int, int]:
    """No fewer JSON arrays, and objects, than ``body`` decodes to (or the decoder builds
    before the error it finds): its ``[`` and its ``{`` outside strings.

    Containers are the dearest part of a decoded record, so the front counts them before it
    decodes a large one. Escaped backslashes, then escaped quotes, are dropped, so that every
    quote left opens or closes a string; the text is split at quotes, ``_SPLIT_BYTES`` at a
    time, and the brackets of every other piece counted: linear, and in C but for a step per
    piece. Exact where the JSON is valid; past an error it can only count more.
    """
    text = body.replace(b"\\\\", b"").replace(b'\\"', b"")
    arrays = objects = inside = 0  # inside: the piece at hand is in a string
    for start in range(0, len(text), _SPLIT_BYTES):
        pieces = text[start : start + _SPLIT_BYTES].split(b'"')
        outside = b"".join(pieces[inside::2])
        arrays += outside.count(b"[")
        objects += outside.count(b"{")
        inside = (inside + len(pieces) - 1) % 2
    return arrays, objects


def record(body: bytes, most_arrays: int) -> dict:
    """A child's record, as the front judges it (the server passes its bytes on undecoded).
    ``garbled`` where it is not a JSON object, or where it is over ``CHECK_BYTES`` and could
    decode to more than the harness sends (:func:`containers`): an object inside the record
    (canonical values are arrays), or more than ``most_arrays`` arrays. Such a record is
    refused undecoded. Never raises: the bytes are the program's to choose."""
    try:
        if len(body) > CHECK_BYTES and _more_than(body, most_arrays):
            return dict(GARBLED)
        value = decode_record(body)
    except Exception:  # a child's bytes: whatever they make the decoder raise
        return dict(GARBLED)
    return value if type(value) is dict else dict(GARBLED)


def _more_than(body: bytes, most_arrays: int) -> bool:
    """Whether ``body`` can decode to more than one object or ``most_arrays`` arrays. Its
    brackets, strings' included, are counted first: a cheap bound, exact for most records."""
    if body.count(b"{") <= 1 and body.count(b"[") <= most_arrays:
        return False
    arrays, objects = containers(body)
    return objects > 1 or arrays > most_arrays


# How the worker's server knows the harness's last record without decoding it (a unit test
# checks both against the harness).
END_RECORD = b'{"t":"end"}'
LOAD_ERROR_START = b'{"t":"load_error"'


class ChildRecords:
    """The worker's server's reading of one execution's value pipe: records as bytes, never
    decoded here (the front decodes each as it judges it: :func:`record`), and no more of them
    than the harness sends: ``loaded``, one per test, ``end`` (or a ``load_error`` alone)."""

    def __init__(self, tests: int) -> None:
        self.frames = Frames(decode=None)
        self.most = tests + 2
        self.received = 0

    def feed(self, data: bytes) -> tuple[list[bytes], str | None]:
        """The records ``data`` completes, and the status the execution ends with: None (it
        goes on), ``end`` (the harness's last record came), ``output_limit`` (a frame, or the
        execution's records, over their byte cap) or ``TOO_MANY_RECORDS`` (the program wrote
        records of its own: those past the harness's count are dropped)."""
        try:
            new = self.frames.feed(data)
        except ValueError:
            return [], "output_limit"
        self.received += len(new)
        if self.received > self.most:
            del new[len(new) - (self.received - self.most) :]
            return new, TOO_MANY_RECORDS
        if any(r == END_RECORD or r.startswith(LOAD_ERROR_START) for r in new):
            return new, "end"
        return new, None


class Frames:
    """Reassembles frames from reads of any size; ``total_cap`` None means no total cap,
    ``decode`` None returns each frame's body as bytes."""

    def __init__(
        self,
        frame_cap: int = FRAME_CAP,
        total_cap: int | None = VALUE_CAP,
        decode: Callable[[bytearray], object] | None = decode_record,
    ) -> None:
        self.buffer = bytearray()
        self.total = 0
        self.frame_cap, self.total_cap, self.decode = frame_cap, total_cap, decode

    def feed(self, data: bytes) -> list:
        """The frames ``data`` completes; raises ValueError past a cap."""
        self.total += len(data)
        if self.total_cap is not None and self.total > self.total_cap:
            raise ValueError("too much value data")
        self.buffer += data
        records = []
        while len(self.buffer) >= 4:
            (size,) = struct.unpack_from(">I", self.buffer)
            if size > self.frame_cap:
                raise ValueError("frame too large")
            if len(self.buffer) < 4 + size:
                break
            if self.decode is None:
                with memoryview(self.buffer) as view:
                    records.append(bytes(view[4 : 4 + size]))
                del self.buffer[: 4 + size]
                continue
            try:
                record = self.decode(self.buffer[4 : 4 + size])
            except Exception:  # a child's bytes: whatever they make the decoder raise
                record = None
            del self.buffer[: 4 + size]
            records.append(record if type(record) is dict else dict(GARBLED))
        return records
