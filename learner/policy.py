"""Building the policy module: dtype policy, LoRA, checkpointed layers, compiled layers; and the
parts of an HF causal LM the rest of the learner reaches for.

Precision. ``learner.dtype = "bfloat16"`` has two meanings, chosen by ``learner.master_dtype``:

- ``"float32"`` (default, mixed precision): parameters, gradients and AdamW state stay float32
  and the forward pass runs under ``torch.autocast(bfloat16)``, so updates smaller than bf16's
  resolution still accumulate: with bf16 parameters an update below ~0.4% of a weight rounds
  away entirely, and at RL learning rates that is most of them.
- ``"same"`` (pure bf16): parameters are stored in bf16 and AdamW updates them in place. Half
  the memory, at the cost of that rounding; use it only when fp32 master weights do not fit.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from common.config import LearnerConfig

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def precision(config: LearnerConfig) -> tuple[torch.dtype, torch.dtype | None]:
    """(parameter dtype, autocast dtype or None) for this config; see the module docstring."""
    compute = DTYPES[config.dtype]
    if compute == torch.float32 or config.master_dtype == "same":
        return compute, None
    return torch.float32, compute


def base_model_of(model: nn.Module) -> nn.Module:
    """The HF ``...ForCausalLM`` under a peft wrapper (or the model itself)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The decoder layers of an HF causal LM (under a peft wrapper too): the units that are
    compiled (``learner.compile``) and sharded one by one (``sharding.py``)."""
    base = base_model_of(model)
    backbone = getattr(base, getattr(base, "base_model_prefix", "model"), None)
    layers = getattr(backbone, "layers", None)
    if not isinstance(layers, nn.ModuleList) or not len(layers):
        raise ValueError(
            f"no decoder layers found in {type(base).__name__} (expected <model>.layers, as in "
            "Qwen2 and Llama): learner.compile and learner.num_ranks > 1 work layer by layer"
        )
    return layers


def serving_dtype_and_pad(model_path: str, export_dtype: str | None) -> tuple[torch.dtype, int]:
    """(the dtype the engines serve in, the pad token id) of the model at ``model_path``.

    The serving dtype is ``export_dtype`` (``model.dtype``) when given, else the model config's
    ``dtype``, else bfloat16. Read before the model is loaded: loading in float32 rewrites the
    config's ``dtype``.
    """
    from transformers import AutoConfig  # lazy: importing learner needs only torch

    hf_config = AutoConfig.from_pretrained(model_path)
    served = export_dtype or getattr(hf_config, "dtype", None)
    dtype = to_dtype(served) if served is not None else torch.bfloat16
    return dtype, getattr(hf_config, "pad_token_id", None) or 0


def autocast(device: torch.device, dtype: torch.dtype | None):
    """``torch.autocast`` for the forward pass, or a no-op when computing in the param dtype."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def load_causal_lm(model_path: str, dtype: torch.dtype) -> nn.Module:
    """The HF causal LM at ``model_path`` in ``dtype``, with the KV cache off (training)."""
    from transformers import AutoModelForCausalLM  # lazy: as in serving_dtype_and_pad

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype)
    model.config.use_cache = False
    return model


def build_policy(
    model_path: str, config: LearnerConfig, param_dtype: torch.dtype, device_type: str
) -> nn.Module:
    """The trainable policy: the HF model, optionally LoRA-wrapped. Its checkpointed layers
    are chosen later, from the model's shape (:func:`checkpoint_layers`). Under LoRA the frozen
    base takes ``lora.base_dtype`` as a learner on ``device_type`` resolves it; what trains
    (the adapters, ``lora.modules_to_save``'s copies) stays in ``param_dtype``."""
    bf16_base = config.bf16_lora_base(device_type)
    model = load_causal_lm(model_path, torch.bfloat16 if bf16_base else param_dtype)
    if config.lora.enabled:
        model = _wrap_lora(model, config)
    if bf16_base:  # what trains keeps its master dtype: lora.modules_to_save's copies too
        for param in model.parameters():
            if param.requires_grad:
                param.data = param.data.to(param_dtype)
    return model


def checkpoint_layers(model: nn.Module, count: int) -> None:
    """Checkpoint the first ``count`` decoder layers (``learner.gradient_checkpointing``):
    their forward keeps only its inputs for backward and runs again there.

    The first ones because backward reaches them last, after the later layers' saved tensors are
    freed (common/memory/arithmetic.py counts the peak that way). Non-reentrant, so gradients
    reach LoRA weights although the frozen embedding's output does not require grad. The wrapper
    replaces the layer's ``forward``, not the module: parameter names stay, FSDP2's hooks gather
    the parameters before the recompute, and a compiled layer compiles the checkpoint with it.
    """
    if count == 0:
        return  # any model, also one whose decoder layers this module cannot find
    layers = decoder_layers(model)
    if not 0 <= count <= len(layers):
        raise ValueError(f"cannot checkpoint {count} of {len(layers)} decoder layers")
    for layer in layers[:count]:
        layer.forward = functools.partial(_checkpointed, layer.forward)


def _checkpointed(forward: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``forward`` checkpointed when autograd records it. A KV cache is refused: the recompute
    would append to it a second time."""
    if not torch.is_grad_enabled():
        return forward(*args, **kwargs)
    if kwargs.get("past_key_values") is not None:
        raise RuntimeError("a checkpointed decoder layer cannot fill a KV cache: share_prompts")
    return checkpoint(forward, *args, use_reentrant=False, **kwargs)


def compile_layers(model: nn.Module) -> None:
    """``torch.compile`` every decoder layer in place (``learner.compile``).

    Layer by layer rather than the whole model: the layers share one compiled graph, a graph
    break in the model's own glue code costs nothing, and parameter names stay as they are.
    Shapes are dynamic: every micro-batch has its own length.
    """
    layers = decoder_layers(model)
    import torch._inductor.config as inductor  # lazy: the compiler, only learner.compile's

    # Inductor's CPU kernels read the thread count at run time, not at compile time: the
    # learner narrows and widens its threads (async.learner_threads_during_rollout).
    inductor.cpp.dynamic_threads = True
    for layer in layers:
        layer.compile(dynamic=True)


def to_dtype(value: object) -> torch.dtype:
    """A serving dtype from a config value (``"bfloat16"``, ``"torch.float16"``, a dtype)."""
    if isinstance(value, torch.dtype):
        return value
    name = str(value).removeprefix("torch.")
    if name not in DTYPES:
        raise ValueError(
            f"model config dtype {value!r} is not one vLLM serves here: {list(DTYPES)}"
        )
    return DTYPES[name]


def _wrap_lora(model: nn.Module, config: LearnerConfig) -> nn.Module:
    # lazy: peft is needed only with lora.enabled
    from peft import LoraConfig as PeftLoraConfig
    from peft import get_peft_model

    lora = config.lora
    peft_config = PeftLoraConfig(
        r=lora.rank,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=list(lora.target_modules),
        # Trained in full beside the adapter: peft wraps each in a ModulesToSaveWrapper (frozen
        # original + trainable copy); export.py sends the copy under the HF name. Weight tying
        # keeps a trained copy of a tied embedding tied to the LM head, as the engines re-tie it
        # (without it peft trains the input embedding alone and the served head would differ).
        modules_to_save=list(lora.modules_to_save) or None,
        ensure_weight_tying=_saves_tied_embedding(model, lora.modules_to_save),
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, peft_config)


def _saves_tied_embedding(model: nn.Module, modules_to_save: list[str]) -> bool:
    """Whether ``modules_to_save`` names (peft: a suffix of the module name) a tied embedding."""
    if not modules_to_save or not getattr(model.config, "tie_word_embeddings", False):
        return False
    embeddings = (model.get_input_embeddings(), model.get_output_embeddings())
    return any(
        module in embeddings and name.endswith(target)
        for name, module in model.named_modules()
        for target in modules_to_save
    )


def load_tokenizer(model_path: str):
    """The tokenizer saved beside the model, if any: checkpoints should be servable as-is."""
    root = Path(model_path)
    if not any((root / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json")):
        return None
    from transformers import AutoTokenizer  # lazy: as in serving_dtype_and_pad

    return AutoTokenizer.from_pretrained(model_path)
