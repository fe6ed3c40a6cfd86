"""The policy's weights as vLLM expects them: HF names, serving dtype, LoRA merged in.

vLLM loads a checkpoint by HF parameter names, so whatever wraps the policy during training
(peft's ``base_model.model.`` prefix and ``.base_layer`` indirection) is stripped here. With
LoRA the merged weight W + scaling * B @ A is computed into a new tensor, leaving the adapter
and the base weights untouched so training continues from exactly the same state.

Tied embeddings: only the input embedding is sent. safetensors refuses two names for one
storage, and the receiving engine re-ties its LM head to the refreshed embedding.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def base_model_of(model: nn.Module) -> nn.Module:
    """The HF ``...ForCausalLM`` under a peft wrapper (or the model itself)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


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
    from peft.tuners.lora import LoraLayer

    merged: dict[str, Tensor] = {}
    for name, module in base.named_modules():
        if not isinstance(module, LoraLayer) or module.merged:
            continue
        weight = module.get_base_layer().weight.float().clone()
        for adapter in module.active_adapters:
            if adapter in module.lora_A:
                weight += module.get_delta_weight(adapter).float()
        merged[f"{name}.weight"] = weight
    return merged


@torch.no_grad()
def export_state_dict(model: nn.Module, dtype: torch.dtype) -> dict[str, Tensor]:
    """Full HF-named state dict of the (merged) policy, in ``dtype``, on CPU."""
    base = base_model_of(model)
    merged = _merged_lora_weights(base) if base is not model else {}
    skip = tied_output_name(model)
    tensors: dict[str, Tensor] = {}
    for name, tensor in base.state_dict().items():
        if ".lora_" in name:
            continue
        name = name.replace(".base_layer.", ".")
        if name == skip:
            continue
        source = merged.get(name, tensor)
        target = dtype if source.is_floating_point() else source.dtype
        tensors[name] = source.detach().to(device="cpu", dtype=target).contiguous()
    return tensors
