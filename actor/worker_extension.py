"""The engine's side of the ``cpu_safetensors`` weight transport, inside vLLM's worker: vLLM loads
this class as ``worker_extension_cls``, its methods reached with ``llm.collective_rpc``, which
keeps updates off the insecure-serialisation path and works on the worker's live model.

Not plain ``model.load_weights``: on CPU the linear weights are prepacked at start-up, so
loading into the parameters has no effect. vLLM's layerwise reload restores the checkpoint
layout, loads, and re-packs each layer once its weights arrived: the first bucket's call opens
the session, the last closes it. An update of one bucket skips that session (``direct_load.py``).
"""

from __future__ import annotations

import logging
import time

import torch
from vllm.config import set_current_vllm_config
from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory
from vllm.model_executor.model_loader.reload import (
    finalize_layerwise_reload,
    initialize_layerwise_reload,
)

from actor.amx import request_amx_tiles
from actor.direct_load import direct_load, supports_direct_load
from actor.tied_lm_head import refresh_tied_lm_head
from common.transport.cpu_safetensors import decode_bucket

# vLLM imports this module in every process that runs an engine's model, before the model
# runner: the permission is asked for there before the first forward pass (actor/amx.py).
request_amx_tiles()

# The collective transport's CPU engine, registered in every vLLM worker process that loads
# this extension (registering it in the driver would not reach a separate engine process).
if "gloo" not in WeightTransferEngineFactory._registry:
    WeightTransferEngineFactory.register_engine(
        "gloo", "actor.transfer_engine", "GlooWeightTransferEngine"
    )

# The layerwise reloader warns on every update about layers with nothing to load (rotary
# caches) and about the tied LM head, which refresh_tied_lm_head takes care of.
logging.getLogger("vllm.model_executor.model_loader.reload.layerwise").setLevel(logging.ERROR)


class WorkerExtension:
    """Mixed into vLLM's worker class; ``self`` is the worker (``self.model_runner`` exists)."""

    def receive_weights_bucket(
        self, payload: bytes, version: int, first: bool, last: bool
    ) -> dict[str, float]:
        """Load one bucket of update ``version``; ``first`` opens the layerwise reload session,
        ``last`` closes it. Plain arguments: vLLM's RPC encoder turns dataclasses into dicts."""
        start = time.perf_counter()
        runner = self.model_runner  # type: ignore[attr-defined]
        model = runner.get_model()
        direct = first and last and self._direct_load_ok(model)
        with set_current_vllm_config(self.vllm_config):  # type: ignore[attr-defined]
            if direct:
                direct_load(model, decode_bucket(payload))
            else:
                if first:
                    initialize_layerwise_reload(model)
                model.load_weights(decode_bucket(payload))
            if last:
                if not direct:
                    finalize_layerwise_reload(model, self.vllm_config.model_config)  # type: ignore[attr-defined]
                refresh_tied_lm_head(model)
                for reset in (
                    runner.reset_lora_state,
                    runner.reset_encoder_cache,
                    runner.reset_mm_cache,
                ):
                    reset()  # what the model runner's own reload_weights does after loading
        return {
            "version": float(version),
            "seconds": time.perf_counter() - start,
            "direct": float(direct),
        }

    def _direct_load_ok(self, model: torch.nn.Module) -> bool:
        """Whether a one-bucket update may skip the layerwise session (decided once)."""
        if not hasattr(self, "_direct_load"):
            self._direct_load = supports_direct_load(model, self.vllm_config)  # type: ignore[attr-defined]
        return self._direct_load
