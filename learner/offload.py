"""The optimiser state's trips to host memory while a colocated engine generates
(``learner.offload_optimizer = "while_generating"``, with ``rollout.colocate``). A state that
lives on the host for the whole run, stepped there, is ``"step"``: FSDP2's CPU offload
(``sharding.py``), which needs no trips.

AdamW keeps two moments per trainable parameter, in fp32 twice the policy's fp32 master weights
(8 B per parameter: 12 GiB of a 1.5B model's learner). Between steps the learner needs none of
it, so after each step it goes to host memory and comes back before the next, and the engine
sharing the GPU has that memory for its weights and KV cache meanwhile. Gradients need no
trip: the optimiser step frees them (``zero_grad(set_to_none=True)``).

Each state tensor goes back to the device it came from: AdamW's ``step`` counters live on the
CPU already and stay there (non-capturable AdamW wants them there). With FSDP2 ranks the state
is DTensor shards; ``DTensor.to`` moves a rank's local shard and keeps its layout, as veRL's
``offload_fsdp_optimizer`` does. A device-to-host copy with ``non_blocking=True`` lands in
pinned memory (torch allocates it so), which makes the way back an asynchronous DMA too.

On CPU learners everything already lives in host memory: nothing moves, and the calls still
run and are timed, so the CPU tier exercises the same path. The CUDA half has not run on a
GPU in this project yet.
"""

from __future__ import annotations

import time

import torch
from torch import Tensor

_HOST = torch.device("cpu")


class OptimizerOffload:
    """Moves one optimiser's state tensors to host memory and back; see the module docstring."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer = optimizer
        # Where each moved tensor lives when resident: (state's parameter id, key) -> device.
        self._homes: dict[tuple[int, str], torch.device] = {}

    @property
    def offloaded(self) -> bool:
        """Whether some state is in host memory now (``offload`` without ``reload`` since)."""
        return bool(self._homes)

    @torch.no_grad()
    def offload(self) -> dict[str, float]:
        """Every state tensor not on the host to pinned host memory; the seconds and bytes
        moved. The device memory is handed back to the driver (``empty_cache``), so another
        process on the GPU can use it."""
        start = time.perf_counter()
        moved, devices = 0, set()
        for param_id, state in self._states():
            for key, value in state.items():
                if not isinstance(value, Tensor) or value.device == _HOST:
                    continue
                self._homes[(param_id, key)] = value.device
                devices.add(value.device)
                moved += _local_bytes(value)
                state[key] = value.to(_HOST, non_blocking=True)
        release_cached(devices)
        return {"seconds": time.perf_counter() - start, "bytes": float(moved)}

    @torch.no_grad()
    def reload(self) -> dict[str, float]:
        """Every tensor :meth:`offload` moved back to its device; the seconds and bytes."""
        start = time.perf_counter()
        moved = 0
        for param_id, state in self._states():
            for key, value in state.items():
                home = self._homes.pop((param_id, key), None)
                if home is not None:
                    moved += _local_bytes(value)
                    state[key] = value.to(home, non_blocking=True)
        self._homes.clear()  # state of parameters the optimiser no longer holds
        return {"seconds": time.perf_counter() - start, "bytes": float(moved)}

    def _states(self):
        """(parameter id, its state dict) of every parameter with state, in a fixed order."""
        for group in self.optimizer.param_groups:
            for param in group["params"]:
                state = self.optimizer.state.get(param)
                if state:
                    yield id(param), state


def _local_bytes(value: Tensor) -> int:
    """Bytes this rank holds of ``value`` (a DTensor's local shard, else the tensor)."""
    local = value.to_local() if hasattr(value, "to_local") else value
    return local.numel() * local.element_size()


def release_cached(devices: set[torch.device]) -> None:
    """Wait for the copies off ``devices``, then return their freed blocks to the driver."""
    if any(device.type == "cuda" for device in devices):
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
