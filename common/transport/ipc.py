"""The ``ipc`` transport's wire format: the engine reads the new weights straight out of the
learner's GPU memory by CUDA IPC handles, through vLLM 0.32's IPC weight-transfer engine
(``vllm/distributed/weight_transfer/ipc_engine.py``), when an engine and a learner rank share a
GPU (``rollout.colocate``). GPU only: CUDA IPC handles exist only for CUDA memory, and are
opened only by a process on the same GPU (the config refuses it elsewhere,
``common/config/root.py``). **It has not run here**: the machines this project is built and
tested on have no GPU; its CPU-testable parts are (``tests/unit/common/transport/test_ipc.py``).

Learner side (``learner/ipc_sender.py``): vLLM's trainer engine
(``IPCTrainerWeightTransferEngine``) runs on **every** learner rank, as vLLM designs it for
FSDP trainers: each rank gathers every full tensor onto its own GPU (the same gathers as any
export), exports an IPC handle per tensor keyed by its GPU's UUID, the handles are
all-gathered over the learner ranks' group, and rank 0 returns the merged ones, one dict
``{gpu uuid: handle}`` per tensor. So each engine finds the copy on its own GPU, made by the
learner rank it is colocated with (one engine and one learner rank per GPU); sending from rank
0 alone would leave every other engine a handle to memory on a GPU it cannot open cheaply, if
at all. The update the driver moves is plain data (names, dtypes, shapes, handles: a few
hundred bytes per tensor), one object in Ray's object store as with ``cpu_safetensors``.

The learner keeps each rank's copies (:func:`snapshot`: never the live parameters, which the
next step changes in place) until it exports the next update: by then every engine loaded this
one (synchronous runs only: ``async.max_staleness`` must be 0), and an engine Ray restarts
meanwhile can still load the latest update. That costs one copy of the model in the serving
dtype per GPU between two exports (3.1 GB for 1.5B in bf16).

Engine side (``actor/receivers.py``): vLLM's own IPC engine (``weight_transfer_config`` with
backend ``ipc``): ``init_weight_transfer_engine`` once with :func:`engine_init_info`, then per
update ``start_weight_update``, ``update_weights`` (opens the handle for its GPU, loads through
vLLM's layerwise reload) and ``finish_weight_update``. The handles pass to the worker as
Python objects only while vLLM's engine runs in the rollout actor's process
(``rollout.engine_process = "actor"``, one worker): a separate engine process would need them
pickled (``VLLM_ALLOW_INSECURE_SERIALIZATION``), which this project does not turn on.

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


def gpus_covered(payload: dict[str, Any]) -> set[str]:
    """UUIDs of the GPUs that hold a copy of every tensor of the update: the GPUs an engine can
    load it on (each learner rank adds its own)."""
    handles = payload["ipc_handles"]
    if not handles:
        return set()
    return set.intersection(*(set(per_gpu) for per_gpu in handles))


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
