"""Length-prefixed frames: the child's records (JSON), and the pool <-> worker messages.

Both use a ``>I`` length, then the body. The child writes records on its value pipe as JSON;
that is untrusted input: a frame over ``FRAME_CAP`` or more than ``VALUE_CAP`` bytes in one
execution ends it as ``output_limit``, and a frame that is not a JSON object becomes
``garbled`` (which fails its test) rather than an error in the worker. The pool and its
workers talk over a socketpair (plain ``os.read``/``os.write``: no zmq in the worker, so no I/O
thread to wake per message and a smaller process to fork) in ``marshal``: both ends are
trusted, and the records a worker passes on were decoded from JSON into plain values first.
``marshal`` took JSON's encoding cost out of the servers' and the front's CPU time.
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
# Bytes asked of one read. Below glibc's mmap threshold (128 KiB): a 1 MiB read buffer was an
# mmap, an mremap to the size read and a munmap every time, in the front and in every server.
READ_BYTES = 64 * 1024


# One decoder, and text rather than bytes: ``json.loads`` makes neither again on every call
# (a worker decodes ~6 records per execution). Bytes that are not UTF-8 raise a ValueError.
_decode = json.JSONDecoder().decode


GARBLED = {"t": "garbled"}  # what a child's frame becomes when it cannot be carried as it is


def encode(message: dict) -> bytes:
    """A pool <-> worker message, framed (``marshal``: trusted on both ends).

    The records a worker passes on came from the child: JSON may decode one nested deeper than
    ``marshal`` writes (2,000 levels; Python 3.13's decoder goes past that), so such a record
    travels as ``garbled`` (which fails its test) rather than raising in the worker, which
    would end it and make the job an ``infra_error``.
    """
    try:
        data = marshal.dumps(message)
    except ValueError:
        if not message.get("recs"):
            raise
        data = marshal.dumps({**message, "recs": [_marshallable(r) for r in message["recs"]]})
    return struct.pack(">I", len(data)) + data


def _marshallable(record: object) -> object:
    try:
        marshal.dumps(record)
    except ValueError:
        return dict(GARBLED)
    return record


def decode_record(body: bytearray) -> object:
    """A child's record: JSON text (``marshal`` is not safe to decode from an adversary)."""
    return _decode(body.decode())


def decode_message(body: bytearray) -> object:
    """A pool <-> worker message, as :func:`encode` made it."""
    return marshal.loads(body)


class Frames:
    """Reassembles frames from reads of any size; ``total_cap`` None means no total cap."""

    def __init__(
        self,
        frame_cap: int = FRAME_CAP,
        total_cap: int | None = VALUE_CAP,
        decode: Callable[[bytearray], object] = decode_record,
    ) -> None:
        self.buffer = bytearray()
        self.total = 0
        self.frame_cap, self.total_cap, self.decode = frame_cap, total_cap, decode

    def feed(self, data: bytes) -> list[dict]:
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
            try:
                record = self.decode(self.buffer[4 : 4 + size])
            except Exception:  # a child's bytes: whatever they make the decoder raise
                record = None
            del self.buffer[: 4 + size]
            records.append(record if type(record) is dict else dict(GARBLED))
        return records
