"""The worker server's two kinds of pipe: its socket to the pool, and the job pipe it feeds a
child through (the job, then a whole program's stdin)."""

from __future__ import annotations

import os
import select
from collections import deque

from sandbox.wire.frames import MESSAGE_CAP, READ_BYTES, Frames, decode_message, encode


class Channel:
    """The worker's end of the socketpair: blocking writes, frames read as they come."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.frames = Frames(MESSAGE_CAP, None, decode_message)

    def send(self, message: dict) -> None:
        data = memoryview(encode(message))
        while data:
            data = data[os.write(self.fd, data) :]

    def receive(self) -> list[dict] | None:
        """The messages one read brings (maybe none); None when the pool has gone."""
        try:
            data = os.read(self.fd, READ_BYTES)
        except OSError:
            data = b""
        return self.frames.feed(data) if data else None


class Writer:
    """Feeds the job, and a whole program's stdin after it, to the child through a
    non-blocking pipe (either can exceed its buffer), in pieces, never joined into one."""

    def __init__(self, fd: int, pieces: list[bytes]) -> None:
        self.fd = fd
        self.pieces = deque(memoryview(piece) for piece in pieces if piece)

    def write(self) -> bool:
        """Write what fits; True once everything is written (or the child is gone)."""
        while self.pieces:
            try:
                written = os.write(self.fd, self.pieces[0])
            except BlockingIOError:
                return False
            except OSError:  # the child died, or closed its stdin; its pipes say the rest
                return True
            self.pieces[0] = self.pieces[0][written:]
            if self.pieces[0]:
                return False
            self.pieces.popleft()
        return True

    def write_all(self) -> None:
        """Write everything, waiting while the pipe is full, then close (a reader that is gone
        ends it too)."""
        while not self.write():
            select.select([], [self.fd], [])
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
