"""Checkpoints and LoRA adapter export.

A checkpoint directory is servable as is: the full model in HF format (full fine-tuning) or the
peft adapter (LoRA), the tokenizer, plus the optimiser state (``optimizer.pt``; a sharded
learner's is a torch distributed checkpoint in ``optimizer/``) and ``learner_state.json``.

Resuming: build the ``Learner`` on the *original* model path with ``resume_from=checkpoint``, so
the reference stays the run's initial policy (built on the checkpoint directory itself, its
reference is the checkpoint's weights).

One rank whose state lives on the host (``learner.offload_optimizer = "step"``) runs inside
FSDP2 with a group of one, its state DTensors of one shard; its checkpoint is the one-rank
layout all the same, so a run may switch ``offload_optimizer`` across a resume.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch import Tensor, nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.tensor import DTensor

from common.durable import fsync_tree
from common.model_files import describe, read_piece
from learner.export import tied_output_name
from learner.policy import base_model_of
from learner.sharding import Ranks

STATE_FILE = "learner_state.json"
OPTIMIZER_FILE = "optimizer.pt"
#: A sharded learner's optimiser state: one torch distributed checkpoint, a shard per rank.
SHARDED_OPTIMIZER_DIR = "optimizer"


def is_lora(model: nn.Module) -> bool:
    return hasattr(model, "peft_config")


def save_training_state(
    out: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    tokenizer,
    state: dict,
    ranks: Ranks | None = None,
) -> None:
    """Weights (model or adapter) + tokenizer + optimiser + ``state`` into ``out``, fsynced.
    With several ranks every rank calls it: rank 0 writes the gathered weights in HF format, and
    every rank its shard of the optimiser state into one distributed checkpoint."""
    ranks = ranks or Ranks(None)
    weights = None
    if ranks.wrapped:  # gathered tensor by tensor onto rank 0's CPU memory only
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        weights = get_model_state_dict(model, options=options)
    if ranks.rank == 0:
        out.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(out, state_dict=weights)
        if tokenizer is not None:
            tokenizer.save_pretrained(out)
    if ranks.sharded:
        shards = {"optimizer": get_optimizer_state_dict(model, optimizer)}
        dcp.save(shards, checkpoint_id=str(out / SHARDED_OPTIMIZER_DIR))
    else:
        torch.save(_plain(optimizer.state_dict()), out / OPTIMIZER_FILE)
    if ranks.rank == 0:
        (out / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")
    # On disk before the driver marks the checkpoint complete: every other rank's shard may be
    # on another machine's view of a shared disk.
    fsync_tree(out if ranks.rank == 0 else out / SHARDED_OPTIMIZER_DIR)
    ranks.barrier()


def written(out: Path) -> dict:
    """What this host holds of checkpoint ``out`` and which Ray node it is ('' outside Ray),
    for a driver on another host to fetch (``common/model_files.py``)."""
    import ray  # lazy: learners are built without Ray in unit tests

    node = ray.get_runtime_context().get_node_id() if ray.is_initialized() else ""
    return {"node": node, "files": list(describe(str(out), read_piece).files)}


def load_weights(out: Path, model: nn.Module) -> dict:
    """Load the checkpoint's weights (full model or adapter) into an unsharded ``model``;
    return the learner state saved beside them."""
    if is_lora(model):
        _load_adapter(out, model)
    else:
        _load_full_weights(out, model)
    return json.loads((out / STATE_FILE).read_text())


def load_optimizer(
    out: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    device: torch.device,
    ranks: Ranks,
) -> None:
    """The optimiser state of checkpoint ``out``, written by as many ranks as load it."""
    sharded = (out / SHARDED_OPTIMIZER_DIR).is_dir()
    if sharded != ranks.sharded:
        saved = "several learner ranks" if sharded else "one learner rank"
        raise ValueError(
            f"checkpoint {out} was written by {saved}: resume it with the learner.num_ranks "
            f"it was trained with (this learner has {ranks.size})"
        )
    if not sharded:
        # torch's restricted unpickler, so the file cannot run code. State kept on the host is
        # read there, never through the device.
        where = "cpu" if ranks.host_state else device
        state = torch.load(out / OPTIMIZER_FILE, map_location=where, weights_only=True)
        optimizer.load_state_dict(state)
        _one_shard_dtensors(optimizer)
        return
    shards = {"optimizer": get_optimizer_state_dict(model, optimizer)}
    # torch's distributed checkpoint reads its ``.metadata`` file with plain pickle (no
    # weights_only option exists for it): a run directory resumed with several ranks must be
    # trusted like code (docs/cluster.md, "A run directory is code").
    dcp.load(shards, checkpoint_id=str(out / SHARDED_OPTIMIZER_DIR))
    set_optimizer_state_dict(model, optimizer, shards["optimizer"])


def _plain(state: dict) -> dict:
    """An optimiser state dict with each one-shard DTensor (one rank inside FSDP2) as the plain
    tensor it holds whole: the layout of a learner without FSDP2."""
    return {
        **state,
        "state": {
            key: {k: v.full_tensor() if isinstance(v, DTensor) else v for k, v in entry.items()}
            for key, entry in state["state"].items()
        },
    }


def _one_shard_dtensors(optimizer: torch.optim.Optimizer) -> None:
    """After ``load_state_dict`` of a plain file into the optimiser of DTensor parameters (one
    rank inside FSDP2): each state tensor of its parameter's shape back as a DTensor laid out
    as the parameter, as AdamW made it (its ``step`` count stays a plain scalar)."""
    for param, entry in optimizer.state.items():
        if not isinstance(param, DTensor):
            continue
        for key, value in entry.items():
            plain = isinstance(value, Tensor) and not isinstance(value, DTensor)
            if plain and value.shape == param.shape:
                local = value.to(param.to_local().device)
                entry[key] = DTensor.from_local(local, param.device_mesh, param.placements)


def _load_adapter(out: Path, model: nn.Module) -> None:
    # lazy: importing learner needs only torch
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    path = out / "adapter_model.safetensors"
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing: a LoRA learner resumes from the adapter saved by save_checkpoint"
        )
    result = set_peft_model_state_dict(model, load_file(str(path)))
    unexpected = list(getattr(result, "unexpected_keys", []))
    if unexpected:
        raise ValueError(
            f"adapter in {out} does not fit this model (different rank or target modules?): "
            f"unexpected keys {unexpected[:3]}"
        )


def _load_full_weights(out: Path, model: nn.Module) -> None:
    from safetensors.torch import load_file  # lazy: as in _load_adapter

    files = sorted(out.glob("model*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no model*.safetensors in {out}: not a full-model checkpoint")
    state: dict[str, torch.Tensor] = {}
    for file in files:
        state.update(load_file(str(file)))
    missing, unexpected = base_model_of(model).load_state_dict(state, strict=False)
    tied = tied_output_name(model)
    missing = [name for name in missing if name != tied]
    if missing or unexpected:
        raise ValueError(
            f"checkpoint {out} does not fit this model: missing {missing[:3]}, "
            f"unexpected {list(unexpected)[:3]}"
        )


def save_adapter(model: nn.Module, directory: str | Path) -> None:
    """Save the LoRA adapter (peft's format) to ``directory``; refused for a full fine-tune."""
    if not is_lora(model):
        raise ValueError("an adapter needs lora.enabled: a full fine-tune has no adapter")
    model.save_pretrained(directory)
