"""Re-tying a CPU engine's LM head after a weight update, for both transports that reload the
engine's weights: with tied embeddings the head keeps its own prepacked copy of the embedding,
which vLLM's layerwise reload does not refresh ("ParallelLMHead: Failed to load weights"), so
sampler logprobs would drift away from the learner's step after step.
"""

from __future__ import annotations

import torch


@torch.no_grad()
def refresh_tied_lm_head(model: torch.nn.Module) -> None:
    """Point a tied LM head at the reloaded embedding and re-pack it (see the module
    docstring)."""
    config = getattr(model, "config", None)
    if not getattr(config, "tie_word_embeddings", False) or not hasattr(model, "lm_head"):
        return
    lm_head = model.lm_head
    embed = model.model.embed_tokens
    if lm_head.weight.data_ptr() != embed.weight.data_ptr():
        lm_head.weight = embed.weight
    quant_method = getattr(lm_head, "quant_method", None)
    if quant_method is not None:
        quant_method.process_weights_after_loading(lm_head)
