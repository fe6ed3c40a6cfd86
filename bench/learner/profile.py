"""Where a learner step's time goes, for ``python -m bench.learner --profile FILE``.

One more step after the timed ones runs under ``torch.profiler``: the full table of operators
goes to FILE, and the JSON gets the step's time per kind of work. On CUDA the kinds are
summed over the GPU kernels themselves (their own time: what the device was busy with; the
rest of the step's wall time is the device waiting on the host: launches, Python, syncs); on
CPU over the operators' own time. The kinds, by name: matrix products (cuBLAS and CUTLASS
kernels, ``aten::mm``), attention (flash and memory-efficient kernels, SDPA), inductor's fused
kernels (``triton_*``, what ``learner.compile`` generates), log-softmax, the optimiser
(``multi_tensor_apply``, ``_foreach_*``), memory copies and fills, and the rest.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

#: The kinds of work, tried in order on a kernel's or an operator's name (lower case).
KINDS = (
    # attention first: its CUTLASS kernels (fmha_cutlass*) are not plain matrix products
    ("attention", re.compile(r"flash|fmha|attention|scaled_dot_product")),
    ("matmul", re.compile(r"gemm|cutlass|xmma|nvjet|cublas|aten::(mm|addmm|bmm|_scaled_mm)$")),
    ("fused", re.compile(r"^triton")),
    ("log_softmax", re.compile(r"softmax")),
    ("optimizer", re.compile(r"multi_tensor|foreach|adam")),
    ("copy", re.compile(r"memcpy|memset|copy_|aten::to$|_to_copy|fill")),
)


def kind_of(name: str) -> str:
    """The kind of work a kernel or operator named ``name`` does (``KINDS``), else "other"."""
    lowered = name.lower()
    return next((kind for kind, pattern in KINDS if pattern.search(lowered)), "other")


def profile_step(step: Callable[[], None], device: torch.device, table: Path) -> dict:
    """Run ``step`` once under the profiler; the full operator table to ``table``; the step's
    wall seconds, its busy seconds (device kernels on CUDA, operators on CPU), those per kind,
    and the 12 largest."""
    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        start = time.perf_counter()
        step()
        if cuda:
            torch.cuda.synchronize()
        wall = time.perf_counter() - start
    events = prof.key_averages()
    sort = "self_device_time_total" if cuda else "self_cpu_time_total"
    table.write_text(events.table(sort_by=sort, row_limit=200) + "\n")
    # on CUDA the kernels (device events: their own time is the GPU's), on CPU the operators
    own = [
        (e.key, (e.self_device_time_total if cuda else e.self_cpu_time_total) / 1e6, e.count)
        for e in events
        if (e.device_type == torch.autograd.DeviceType.CUDA) == cuda
    ]
    own = [row for row in own if row[1] > 0]
    kinds: dict[str, float] = {}
    for name, seconds, _ in own:
        kinds[kind_of(name)] = kinds.get(kind_of(name), 0.0) + seconds
    busy = sum(seconds for _, seconds, _ in own)
    top = sorted(own, key=lambda row: -row[1])[:12]
    return {
        "step_s": wall,
        "busy_s": busy,
        "kinds_s": dict(sorted(kinds.items(), key=lambda item: -item[1])),
        "top": [{"name": n[:120], "s": s, "count": c} for n, s, c in top],
        "table": str(table),
    }
