"""Learner ranks: N processes train one policy, sharded with FSDP2 (``learner.num_ranks``).

Each rank holds 1/N of the parameters, gradients and AdamW state (``fully_shard`` on every
decoder layer, then on the root), and each train step's micro-batches are dealt out across the
ranks. The loss does not depend on N: every micro-batch's loss is already normalised by the
whole step's counts (``step.py``), so the step's gradient is the *sum* of the micro-batches'
gradients, whichever rank ran them: the reduce-scatter sums instead of averaging, and the
metrics are summed across ranks the same way.

Every collective must be entered by every rank in the same order, so every rank runs the same
number of micro-batches (a rank dealt fewer runs a copy of one with weight 0: same collectives,
no gradient), and gathers parameters in the module's own order.

``learner.offload_optimizer = "step"`` puts the same units under FSDP2's ``CPUOffloadPolicy``,
one rank or several: parameters, gradients and AdamW's state live in host memory, each unit's
parameters copied to the device for its forward and backward, where the optimiser steps on the
host. One rank then needs a process group too: a group of one over an in-process store.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, OffloadPolicy, fully_shard
from torch.distributed.tensor import DTensor

from common.rendezvous import join_interface, store_client
from common.types import ProcessGroupSpec, TrainSample
from learner.batching import pack_micro_batches, prompt_groups, sample_length
from learner.policy import decoder_layers


def full(tensor: Tensor) -> Tensor:
    """The whole tensor of a ``DTensor`` shard (a collective: every rank must call it in the
    same order), or the tensor itself."""
    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


class Root(nn.Module):
    """The FSDP root around a sharded model, whose forward runs any function of the model.

    FSDP gathers a unit's parameters in its forward's pre-hook, and the logprob code runs the
    backbone and the LM head in chunks, not the model's own forward: run through :func:`call`,
    all of it happens inside one root forward.
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return fn(self.model, *args, **kwargs)


def call(module: nn.Module, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(model, *args, **kwargs)``, inside the root's forward when ``module`` is a
    :class:`Root`."""
    if isinstance(module, Root):
        return module(fn, *args, **kwargs)
    return fn(module, *args, **kwargs)


@dataclass(frozen=True)
class Deal:
    """One rank's share of a step's micro-batches: index lists, and a weight per micro-batch
    (1, or 0 for a padding copy that only keeps the collectives in step)."""

    micro_batches: list[list[int]]
    weights: list[float]


class Ranks:
    """This process's place in the learner group; a group of one is a plain single learner,
    unless its state lives on the host (``host_state``: ``offload_optimizer = "step"``),
    which wraps it in FSDP2 all the same."""

    def __init__(
        self,
        spec: ProcessGroupSpec | None,
        timeout_s: float = 1800,
        *,
        host_state: bool = False,
        device_type: str = "cpu",
    ) -> None:
        self.rank = spec.rank if spec else 0
        self.size = spec.world_size if spec else 1
        self.host_state = host_state
        # FSDP2's mesh needs a default group, also of one process: an in-process store
        self._own_group = self.size == 1 and host_state and not dist.is_initialized()
        if self._own_group:
            backend = "cpu:gloo,cuda:nccl" if device_type == "cuda" else "gloo"
            dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
        if self.size > 1 and not dist.is_initialized():
            # With NCCL, CPU tensors (metric sums, gathered rows) still go over gloo.
            backend = "cpu:gloo,cuda:nccl" if spec.backend == "nccl" else spec.backend
            timeout = datetime.timedelta(seconds=timeout_s)
            join_interface(spec.address, spec.interface)  # reachable, or one line why not
            # A client of the store whoever picked the address serves (common/rendezvous.py),
            # not torch's tcp:// store, which rank 0 would serve on every interface.
            dist.init_process_group(
                backend,
                store=store_client(spec.address, timeout),
                rank=spec.rank,
                world_size=spec.world_size,
                timeout=timeout,
            )

    @property
    def sharded(self) -> bool:
        """Several ranks: their collectives must pair, and checkpoints are sharded."""
        return self.size > 1

    @property
    def wrapped(self) -> bool:
        """The policy runs inside FSDP2 units: several ranks, or its state on the host."""
        return self.sharded or self.host_state

    def shard(self, model: nn.Module, device: torch.device, offload: bool = True) -> nn.Module:
        """``fully_shard`` each decoder layer, then a :class:`Root` around the model (returned;
        the model itself when :attr:`wrapped` is false); gradients summed across ranks. With
        ``host_state`` and ``offload`` the shards live in host memory (pinned for a CUDA
        learner's copies; a CPU-only build cannot pin); ``offload = False`` keeps a frozen
        reference's on the device."""
        if not self.wrapped:
            return model
        mesh = init_device_mesh(device.type, (self.size,))
        policy = OffloadPolicy()
        if self.host_state and offload:
            policy = CPUOffloadPolicy(pin_memory=device.type == "cuda")
        for layer in decoder_layers(model):
            fully_shard(layer, mesh=mesh, offload_policy=policy)
        root = fully_shard(Root(model), mesh=mesh, offload_policy=policy)
        for module in root.modules():
            if isinstance(module, FSDPModule):
                module.set_gradient_divide_factor(1.0)
                module.set_force_sum_reduction_for_comms(True)  # gloo has no PREMUL_SUM
        return root

    def split(self, costs: Sequence[int]) -> list[list[int]]:
        """Item indices per rank, balanced by cost: longest first, each to the least loaded
        rank so far (one rank: every index, in order)."""
        if not self.sharded:
            return [list(range(len(costs)))]
        load = [0] * self.size
        shares: list[list[int]] = [[] for _ in range(self.size)]
        for i in sorted(range(len(costs)), key=lambda i: (-costs[i], i)):
            rank = min(range(self.size), key=lambda r: (load[r], r))
            shares[rank].append(i)
            load[rank] += costs[i]
        return [sorted(share) for share in shares]

    def plan(self, samples: Sequence[TrainSample], budget: int, share_prompts: bool) -> Deal:
        """This rank's micro-batches of ``samples``: its share, packed by the token budget (all
        of them with one rank). Every rank packs every share, so each knows how many
        micro-batches the busiest runs without asking. With shared prompts a prompt's rows go
        to one rank together, so that it runs the prompt once, unless there are fewer prompts
        than ranks."""
        units = [[i] for i in range(len(samples))]
        groups = prompt_groups(samples) if share_prompts else units
        if len(groups) >= self.size:  # fewer prompts than ranks: deal rows, none idle
            units = groups
        costs = [sum(sample_length(samples[i]) for i in unit) for unit in units]
        packed = []
        for share in self.split(costs):
            indices = sorted(i for u in share for i in units[u])
            part = [samples[i] for i in indices]
            micro_batches = pack_micro_batches(part, budget, share_prompts)
            packed.append([[indices[i] for i in m] for m in micro_batches])
        return self.deal(packed)

    def deal(self, packed: list[list[list[int]]]) -> Deal:
        """This rank's micro-batches, given every rank's (``packed[rank]``), padded to the
        largest count with weightless copies so that every rank runs as many."""
        mine = packed[self.rank]
        count = max(len(micro_batches) for micro_batches in packed)
        padding = [mine[0][:1] if mine else [0]] * (count - len(mine))  # one row is enough
        return Deal(mine + padding, [1.0] * len(mine) + [0.0] * len(padding))

    def sum(self, values: dict[str, float]) -> dict[str, float]:
        """``values`` summed over the ranks (float64, every rank gets the sums)."""
        if not self.sharded:
            return values
        keys = sorted(values)
        total = torch.tensor([values[k] for k in keys], dtype=torch.float64)
        dist.all_reduce(total)
        return dict(zip(keys, total.tolist(), strict=True))

    def gather(self, rows: dict[int, Tensor]) -> dict[int, Tensor]:
        """Every rank's ``{sample index: row}`` merged, on every rank."""
        if not self.sharded:
            return rows
        parts: list[dict[int, Tensor] | None] = [None] * self.size
        dist.all_gather_object(parts, rows)
        return {i: row for part in parts if part for i, row in part.items()}

    def barrier(self) -> None:
        if self.sharded:
            dist.barrier()

    def close(self) -> None:
        """Leave the group once every rank is done: a process that exits with the group alive
        can abort in gloo's teardown while a peer still talks to it."""
        if (self.sharded or self._own_group) and dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()
