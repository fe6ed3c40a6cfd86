"""The learner's optimiser (``learner.optimizer``): torch's AdamW, or a low-precision AdamW.

- ``adamw_bf16``: bf16 parameters and moments, the update computed in float32 and written back
  with stochastic rounding, so in expectation it is the float32 update and small updates
  accumulate instead of vanishing (hence ``master_dtype = "same"``).
- ``adamw_8bit``: the moments quantised to 8 bits blockwise (bitsandbytes' scheme); tensors
  under 4,096 elements keep full-precision moments.

Both are torchao's, an optional extra: they work on FSDP2's DTensor shards, and their step is
one ``torch.compile``d function per parameter shape, so the first step pays the compilation.
Their tolerance against torch's AdamW, measured: tests/unit/learner/test_optimizers.py.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor, nn

from common.config import LearnerConfig

INSTALL_HINT = "needs torchao: pip install '.[lowmem]'"


def build_optimizer(params: Iterable[nn.Parameter], config: LearnerConfig) -> torch.optim.Optimizer:
    """``learner.optimizer`` over ``params`` with the config's lr, betas, eps and weight decay."""
    settings = dict(
        lr=config.lr,
        betas=tuple(config.adam_betas),
        eps=config.adam_eps,
        weight_decay=config.weight_decay,
    )
    if config.optimizer == "adamw":
        return torch.optim.AdamW(params, **settings)
    try:
        # lazy: an optional extra (seconds to import), needed only by these two optimisers
        import torch._inductor.config as inductor
        from torchao.optim import AdamW8bit, _AdamW
    except ImportError:
        raise ImportError(f"learner.optimizer = {config.optimizer!r} {INSTALL_HINT}") from None
    # The compiled step's CPU kernels must read the thread count at run time: the learner
    # narrows and widens its threads (async.learner_threads_during_rollout).
    inductor.cpp.dynamic_threads = True
    kind = AdamW8bit if config.optimizer == "adamw_8bit" else _AdamW
    # Stochastic rounding applies where a parameter is bf16 (torchao checks each one).
    return kind(params, bf16_stochastic_round=True, **settings)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Set every group's learning rate; torchao keeps it as a tensor (so that changing it does
    not recompile the step), which must be filled in place."""
    for group in optimizer.param_groups:
        if isinstance(group["lr"], Tensor):
            group["lr"].fill_(lr)
        else:
            group["lr"] = lr


def current_lr(optimizer: torch.optim.Optimizer) -> float:
    """The first group's learning rate as a number."""
    return float(optimizer.param_groups[0]["lr"])
