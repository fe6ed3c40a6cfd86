"""Length-prefixed JSON frames: the child's records, and the pool <-> worker messages.

Both use ``>I`` length + a JSON object. The child writes records on its value pipe; that is
untrusted input: a frame over ``FRAME_CAP`` or more than ``VALUE_CAP`` bytes in one execution
ends it as ``output_limit``, and a frame that is not a JSON object becomes ``garbled`` (which
fails its test) rather than an error in the worker. The pool and its workers talk over a
socketpair with the same framing (plain ``os.read``/``os.write``: no zmq in the worker, so no
I/O thread to wake per message and a smaller process to fork).
"""

from __future__ import annotations

import json
import struct

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


def encode(message: dict) -> bytes:
    data = json.dumps(message).encode()
    return struct.pack(">I", len(data)) + data


class Frames:
    """Reassembles frames from reads of any size; ``total_cap`` None means no total cap."""

    def __init__(self, frame_cap: int = FRAME_CAP, total_cap: int | None = VALUE_CAP) -> None:
        self.buffer = bytearray()
        self.total = 0
        self.frame_cap, self.total_cap = frame_cap, total_cap

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
                record = _decode(self.buffer[4 : 4 + size].decode())
            except (ValueError, RecursionError):
                record = {"t": "garbled"}
            del self.buffer[: 4 + size]
            records.append(record if isinstance(record, dict) else {"t": "garbled"})
        return records
