"""What one vLLM engine holds on its GPU, by the same arithmetic as the learner's
(``common/memory/arithmetic.py``): the memory plan of a colocated run and the engine's own
``gpu_memory_utilization`` (actor/rollout_worker.py) both read it."""

from __future__ import annotations

from dataclasses import dataclass

from common.memory.arithmetic import CUDA_CONTEXT_GIB, DTYPE_BYTES, GIB, ModelShape

#: vLLM's memory beyond weights and KV cache: activations of its profile run at
#: max_num_batched_tokens, sampler buffers, CUDA graphs. vLLM logs it at start-up ("non-KV
#: cache memory"); a rounded-up estimate for 0.5B-7B models, not measured here. Sleep mode
#: frees only what its own allocator tagged (weights, KV cache), so a sleeping engine keeps it
#: (vLLM docs, features/sleep_mode).
ENGINE_RUNTIME_GIB = 1.0
#: What a sleeping engine keeps on its GPU whatever the model (``EngineMemory.asleep``): what a
#: colocated learner's card holds besides the learner while it steps.
SLEEPING_ENGINE_GIB = ENGINE_RUNTIME_GIB + CUDA_CONTEXT_GIB


@dataclass(frozen=True)
class EngineMemory:
    """One vLLM engine's bytes on one of its GPUs."""

    weights: int
    kv_cache: int
    runtime: int = int(ENGINE_RUNTIME_GIB * GIB)
    context: int = int(CUDA_CONTEXT_GIB * GIB)

    @property
    def awake(self) -> int:
        return self.weights + self.kv_cache + self.runtime + self.context

    @property
    def asleep(self) -> int:
        """What a sleeping engine keeps on the GPU: level 1 moves the weights to host memory and
        frees the KV cache, level 2 frees both (vLLM docs, features/sleep_mode); on the GPU the
        two are the same, and what the sleep allocator never tagged stays."""
        return self.runtime + self.context


def engine_memory(
    shape: ModelShape, model_dtype: str, kv_cache_gib: float, tensor_parallel_size: int = 1
) -> EngineMemory:
    """The engine as actor/rollout_worker.py builds it: weights in ``model.dtype`` split over
    its tensor-parallel GPUs, and ``kv_cache_memory_bytes = rollout.kv_cache_gib`` per worker
    (vLLM then skips its memory profiling and reserves exactly that)."""
    weights = shape.parameters * DTYPE_BYTES[model_dtype] // tensor_parallel_size
    return EngineMemory(weights=weights, kv_cache=int(kv_cache_gib * GIB))


def kv_cache_tokens(shape: ModelShape, model_dtype: str, kv_cache_gib: float) -> int:
    """Tokens a KV cache of ``kv_cache_gib`` holds (keys and values of every layer)."""
    return int(kv_cache_gib * GIB) // shape.kv_bytes_per_token(model_dtype)
