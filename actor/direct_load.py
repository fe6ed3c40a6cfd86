"""Load a whole weight update into a live CPU engine without vLLM's layerwise reload session.

vLLM's layerwise reload is general (quantised layers, padded weights, updates in many pieces)
and pays for it per tensor; on a small model that bookkeeping is most of the load
(docs/benchmarks.md). An update in one piece to an unquantised CPU engine without LoRA layers is
simple: only the linear layers lost their checkpoint-layout weight (the CPU kernels prepacked
it). So each prepacked layer gets a fresh weight of its checkpoint shape (from the metadata vLLM
recorded at load), the model's own ``load_weights`` copies the update in, and exactly the layers
that received weights are re-packed, as at start-up. The logprobs after either path are bitwise
identical (tests/integration/test_weight_push.py).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from vllm.model_executor.layers.linear import UnquantizedLinearMethod
from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod
from vllm.model_executor.model_loader.reload.layerwise import get_layerwise_info
from vllm.model_executor.model_loader.reload.meta import materialize_meta_tensor
from vllm.model_executor.model_loader.reload.sanitize import restore_layer_refs
from vllm.platforms import current_platform


def supports_direct_load(model: torch.nn.Module, vllm_config) -> bool:
    """Whether :func:`direct_load` is exact for this model: a CPU engine (the layout reasoning
    above is the CPU kernels'; GPU engines keep vLLM's reload), unquantised, no LoRA wrappers,
    and every layer with a weight-processing method is a plain linear or embedding layer."""
    if not current_platform.is_cpu():
        return False
    if vllm_config.quant_config is not None or vllm_config.lora_config is not None:
        return False
    plain = (UnquantizedLinearMethod, UnquantizedEmbeddingMethod)
    return all(
        isinstance(module.quant_method, plain)
        for module in model.modules()
        if getattr(module, "quant_method", None) is not None
    )


@torch.no_grad()
def direct_load(model: torch.nn.Module, weights: Iterable[tuple[str, torch.Tensor]]) -> int:
    """Load ``weights`` (checkpoint names and layout) into ``model`` and re-pack the layers
    they reach; returns how many layers were re-packed. Call only where
    :func:`supports_direct_load` holds."""
    processed = {
        name: module
        for name, module in model.named_modules()
        if getattr(module, "quant_method", None) is not None
    }
    kept = {}
    for name, layer in processed.items():
        if layer.weight.numel() == 0:  # prepacked: the kernel holds the only copy
            kept[name] = (layer.weight, layer.cpu_linear)
            layer.weight = _checkpoint_weight(layer, get_layerwise_info(layer))
    loaded = model.load_weights(weights)
    repacked = 0
    for name, layer in processed.items():
        if f"{name}.weight" not in loaded:
            if name in kept:
                layer.weight, layer.cpu_linear = kept[name]
            continue
        layer.quant_method.process_weights_after_loading(layer)
        repacked += 1
    return repacked


def _checkpoint_weight(layer: torch.nn.Module, info) -> torch.Tensor:
    """An uninitialised weight in checkpoint layout, with the parameter class and attributes
    (weight loader, shard dimensions) vLLM recorded for ``layer`` when it loaded the model."""
    weight = restore_layer_refs(materialize_meta_tensor(info.restore_metadata[0]["weight"]), layer)
    loader = weight.weight_loader
    # A layerwise reload leaves its wrapper on the recorded metadata; the plain loader is inside.
    while loader.__name__ == "online_process_loader":
        loader = loader.__wrapped__
    weight.weight_loader = loader
    return weight
