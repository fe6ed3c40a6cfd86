"""Frames on the pipes (``sandbox/wire/frames.py``): split reads reassembled, caps enforced, and a
child's records never decoded as the pool's own messages."""

from __future__ import annotations

import struct

import pytest

from sandbox.isolated import child
from sandbox.wire.frames import MESSAGE_CAP, Frames, decode_message, encode


def test_frames_reassemble_split_reads_and_enforce_caps():
    stream = child.frame({"t": "loaded"}) + child.frame({"t": "end"})
    frames = Frames()
    assert frames.feed(stream[:3]) == []
    assert frames.feed(stream[3:]) == [{"t": "loaded"}, {"t": "end"}]
    assert Frames().feed(struct.pack(">I", 4) + b"[1]\n") == [{"t": "garbled"}]
    with pytest.raises(ValueError):
        Frames(frame_cap=10).feed(struct.pack(">I", 11))
    with pytest.raises(ValueError):
        Frames(total_cap=100).feed(b"\0" * 101)


def test_pool_worker_messages_round_trip_and_records_never_decode_as_marshal():
    message = {"op": "done", "id": 3, "recs": [{"t": "test", "values": [["int", "0x2"]]}]}
    frames = Frames(MESSAGE_CAP, None, decode_message)
    assert frames.feed(encode(message) + encode({"op": "ready"})) == [message, {"op": "ready"}]
    assert Frames().feed(encode(message)) == [{"t": "garbled"}]  # a child's pipe: JSON only
