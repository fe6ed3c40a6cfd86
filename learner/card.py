"""The memory of the card a learner rank runs on: the ceiling its micro-batches are fitted to
when no ``learner.memory_gib`` is set (``common.memory.fit.fit_card``)."""

from __future__ import annotations

import torch

from common.memory.arithmetic import GIB


def card_memory_gib(device: torch.device) -> float:
    """The CUDA card's total memory in GiB (what torch reports: 79.1 for an 80 GB H100); 0 on
    other devices, whose memory is the host's, shared with everything else on it."""
    if device.type != "cuda":
        return 0.0
    return torch.cuda.get_device_properties(device).total_memory / GIB
