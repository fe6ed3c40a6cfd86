"""The ``ipc`` transport's wire format: an engine reads the new weights straight out of the
learner's GPU memory by CUDA IPC handles, through vLLM 0.32's IPC weight-transfer engine, when
an engine and a learner rank share a GPU (``rollout.colocate``). Every learner rank sends its own
copy's handles, keyed by GPU UUID, since a handle opens only on the GPU that holds the memory;
the design and the config's refusals are in docs/cluster.md (Weight transports). **It has not run
here**; its CPU-testable parts are tested (``tests/unit/common/transport/test_ipc.py``).

Unpacked, not vLLM's packed mode: packed reuses one staging buffer per rank across chunks and
needs every engine to have read a chunk before the next is written, i.e. the trainer driving
the engines, which here the driver does only after the learner's call returned.
"""

from __future__ import annotations

from typing import Any

import torch

from common.transport.collective import nbytes

NAME = "ipc"

#: Payload keys the update carries (``IPCWeightTransferUpdateInfo``'s fields).
PAYLOAD_KEYS = ("names", "dtype_names", "shapes", "ipc_handles")


def engine_init_info() -> dict[str, Any]:
    """What ``init_weight_transfer_engine`` takes (``IPCWeightTransferInitInfo``): unpacked,
    as the learner sends (see the module docstring)."""
    return {"packed": False}


def snapshot(tensor: torch.Tensor) -> torch.Tensor:
    """A contiguous copy of ``tensor`` sharing no memory with it: the learner's export may
    return a parameter itself (same dtype and device), which the next optimiser step
    overwrites while an engine may still have to read this version."""
    return tensor.detach().clone(memory_format=torch.contiguous_format)


def update_bytes(payload: dict[str, Any]) -> int:
    """Bytes of the tensors an update's handles point at (one copy; each GPU holds its own)."""
    return sum(nbytes(d, s) for d, s in zip(payload["dtype_names"], payload["shapes"], strict=True))


def check_update(payload: dict[str, Any]) -> None:
    """Refuse a malformed update before vLLM opens any handle: one list entry per tensor, one
    handle dict per tensor (the unpacked layout)."""
    missing = [key for key in PAYLOAD_KEYS if key not in payload]
    if missing:
        raise ValueError(f"ipc weight update lacks {missing}")
    count = len(payload["names"])
    lengths = {key: len(payload[key]) for key in PAYLOAD_KEYS}
    if any(length != count for length in lengths.values()):
        raise ValueError(f"ipc weight update has lists of different lengths: {lengths}")
