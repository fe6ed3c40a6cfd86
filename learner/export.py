"""The policy's weights as vLLM expects them: HF names, serving dtype, LoRA merged in.

Whatever wraps the policy during training (peft's ``base_model.model.`` prefix and
``.base_layer`` indirection) is stripped. With LoRA the merged weight W + scaling * B @ A is
computed into a new tensor, leaving the adapter and the base weights untouched. Of a module in
``lora.modules_to_save``, held by peft twice (frozen original, trained copy), the trained copy
is sent. A sharded learner's parameters are gathered one by one: every rank runs this, in the
same order.

Tied embeddings: only the input embedding is sent. safetensors refuses two names for one
storage, and the receiving engine re-ties its LM head to the refreshed embedding.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor, nn

from learner.policy import base_model_of
from learner.sharding import full


def tied_output_name(model: nn.Module) -> str | None:
    """Parameter name of the LM head weight when it is tied to the input embedding, else None."""
    base = base_model_of(model)
    head, embed = base.get_output_embeddings(), base.get_input_embeddings()
    if head is None or embed is None:
        return None
    tied = getattr(base.config, "tie_word_embeddings", False)
    if not tied and head.weight.data_ptr() != embed.weight.data_ptr():
        return None
    for name, module in base.named_modules():
        if module is head:
            return f"{name}.weight"
    return None


@torch.no_grad()
def _merged_lora_weights(base: nn.Module) -> dict[str, Tensor]:
    """``{hf_name: W + delta}`` for every LoRA-wrapped layer, in float32, adapters untouched."""
    # lazy: only a peft-wrapped policy gets here
    from peft.tuners.lora import LoraLayer

    merged: dict[str, Tensor] = {}
    for name, module in base.named_modules():
        if not isinstance(module, LoraLayer) or module.merged:
            continue
        weight = full(module.get_base_layer().weight).float().clone()
        for adapter in module.active_adapters:
            if adapter in module.lora_A:
                weight += full(module.get_delta_weight(adapter)).float()
        merged[f"{name}.weight"] = weight
    return merged


def _modules_to_save(base: nn.Module) -> dict[str, str]:
    """``{wrapper name: prefix of the submodule its forward runs}`` for every peft
    ModulesToSaveWrapper in ``base`` (``"original_module."`` with no active adapter)."""
    try:  # lazy: importing learner needs only torch
        from peft.utils import ModulesToSaveWrapper
    except ImportError:  # peft is optional: without it nothing is wrapped
        return {}
    wrappers = {}
    for name, module in base.named_modules():
        if isinstance(module, ModulesToSaveWrapper):
            active = module.active_adapters
            live = bool(active) and not getattr(module, "disable_adapters", False)
            wrappers[name] = f"modules_to_save.{active[0]}." if live else "original_module."
    return wrappers


def _unwrap_saved_name(name: str, wrappers: dict[str, str]) -> str | None:
    """The HF name of the copy a ModulesToSaveWrapper runs; None for its other copies."""
    for prefix, live in wrappers.items():
        if name.startswith(prefix + "."):
            rest = name[len(prefix) + 1 :]
            return f"{prefix}.{rest[len(live) :]}" if rest.startswith(live) else None
    return name


def _exported(
    model: nn.Module, merge: bool = True
) -> Iterator[tuple[str, Tensor, dict[str, Tensor]]]:
    """(HF name, the model's tensor, merged LoRA weights when ``merge``) of every tensor the
    engines load, in the model's own order."""
    base = base_model_of(model)
    merged = _merged_lora_weights(base) if merge and base is not model else {}
    skip = tied_output_name(model)
    wrappers = _modules_to_save(base) if base is not model else {}
    for name, tensor in base.state_dict().items():
        if ".lora_" in name:
            continue
        name = _unwrap_saved_name(name, wrappers)
        if name is None:
            continue
        name = name.replace(".base_layer.", ".")
        if name != skip:
            yield name, tensor, merged


@torch.no_grad()
def iter_export(
    model: nn.Module, dtype: torch.dtype, device: torch.device | str = "cpu"
) -> Iterator[tuple[str, Tensor]]:
    """The (merged) policy as HF-named tensors in ``dtype`` on ``device``, one at a time: a
    sharded policy's are gathered as they come, so no more than one is whole at once."""
    for name, tensor, merged in _exported(model):
        source = merged[name] if name in merged else full(tensor)
        target = dtype if source.is_floating_point() else source.dtype
        yield name, source.detach().to(device=device, dtype=target).contiguous()


def export_metadata(model: nn.Module, dtype: torch.dtype) -> list[tuple[str, torch.dtype, tuple]]:
    """(name, dtype, shape) of what :func:`iter_export` yields, in its order, without gathering
    anything (a sharded tensor knows its global shape; a merged LoRA weight has its base's)."""
    return [
        (name, dtype if t.is_floating_point() else t.dtype, tuple(t.shape))
        for name, t, _ in _exported(model, merge=False)
    ]


def export_state_dict(model: nn.Module, dtype: torch.dtype) -> dict[str, Tensor]:
    """Full HF-named state dict of the (merged) policy, in ``dtype``, on CPU."""
    return dict(iter_export(model, dtype))
