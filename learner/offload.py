"""The optimiser state's trips to host memory while a colocated engine generates
(``learner.offload_optimizer = "while_generating"``, with ``rollout.colocate``); a state that
lives on the host for the whole run is ``"step"``: FSDP2's CPU offload (``sharding.py``).

AdamW's two moments per trainable parameter are not needed between steps, so after each step
they go to host memory and come back before the next, and the engine sharing the GPU has that
memory meanwhile. Gradients need no trip: the optimiser step frees them.

Each state tensor goes back to the device it came from (AdamW's ``step`` counters live on the
CPU already). With FSDP2 ranks the state is DTensor shards; ``DTensor.to`` moves a rank's local
shard and keeps its layout. A device-to-host copy with ``non_blocking=True`` lands in pinned
memory, which makes the way back an asynchronous DMA too. On CPU learners nothing moves, and the
calls still run and are timed, so the CPU tier exercises the same path.
"""

from __future__ import annotations

import time

import torch
from torch import Tensor

_HOST = torch.device("cpu")


class OptimizerOffload:
    """Moves one optimiser's state tensors to host memory and back."""

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
        """Every state tensor not on the host to pinned host memory, the device memory handed
        back to the driver for another process on the GPU; the seconds and bytes moved."""
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
