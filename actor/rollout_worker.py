"""The rollout worker: one vLLM engine, generating G completions per prompt.

A plain class (made a Ray actor at launch) that speaks plain data. Every completion carries the
weight version of the engine that sampled it, which lets the learner account for staleness.

Sampling details that matter for GRPO:

- each of the G samples of a prompt is its own request with its own seed: one seed for
  different requests correlates their samples, which shrinks the group's variance;
- ``logprobs_mode="processed_logprobs"``: logprobs of the distribution actually sampled (after
  temperature), which the learner reproduces by dividing its logits by the temperature;
- after every weight update the prefix cache is reset: cached prefixes hold old keys and values.

By default (``rollout.engine_process = "actor"``) vLLM's engine core runs in this actor's
process: no message per engine step, and on CPU hosts no second process competing with the
engine's threads. The in-process CPU worker makes ``torch.set_num_threads`` a no-op for the
whole process: nothing else should compute in a rollout actor.
"""

from __future__ import annotations

import contextlib
import json
import logging
import operator
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from actor.receivers import make_receiver
from common.config import ModelConfig, RolloutConfig
from common.memory.arithmetic import GIB, ModelShape
from common.memory.engine import engine_memory
from common.model_files import ModelFiles, local_path
from common.transport import collective, ipc
from common.transport.collective import backend_for
from common.types import Completion, RolloutRequest, TrainSample, WeightUpdate

# vllm is imported inside the functions that use it: the driver imports this module to make the
# class a Ray actor, and vLLM reads the environment that RolloutWorker.__init__ sets first.

logger = logging.getLogger(__name__)

_SAMPLE_INDEX = operator.attrgetter("sample_index")


class StaleWeightsError(RuntimeError):
    """The engine is older than the weights the caller requires: Ray restarted this actor
    between two calls (it came back with the base model, version 0) and the update it had
    loaded is lost. The fleet answers by loading the latest update into it and retrying."""


class RolloutWorker:
    """Hosts one vLLM engine and serves generation and weight-update calls."""

    def __init__(
        self,
        model_path: str | ModelFiles,
        rollout: RolloutConfig,
        model: ModelConfig,
        seed: int = 0,
        worker_index: int = 0,
        lora_rank: int = 0,
        transport: str = "cpu_safetensors",
    ) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
        model_path = local_path(model_path)  # fetched once per host that lacks it
        # Read by vLLM when the engine is built; rollout.engine_process says where it runs.
        in_actor = rollout.engine_process == "actor"
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0" if in_actor else "1"
        import vllm.envs

        vllm.envs.disable_envs_cache()  # an engine built earlier in this process froze them
        from vllm import LLM

        self.config = rollout
        self.worker_index = worker_index
        self.weight_version = 0
        self.receiver = make_receiver(transport)
        self._calls = 0  # makes engine request ids unique across calls
        # rollout.colocate: what the engine has let go of while the learner steps (vLLM's
        # sleep tags), and whether its weights were discarded (level 2) and not loaded since.
        self._asleep: set[str] = set()
        self._discarded = False
        if rollout.colocate:  # vLLM-CPU says it cannot sleep at every call: once is enough
            logging.getLogger("vllm.v1.worker.cpu_worker").addFilter(_SaidOnce())
        start = time.perf_counter()
        with _thread_binding(rollout):
            self.llm = LLM(
                model=model_path,
                dtype=model.dtype,
                max_model_len=model.max_model_len,
                seed=seed + 1000 * worker_index,
                enforce_eager=rollout.enforce_eager,
                kv_cache_memory_bytes=int(rollout.kv_cache_gib * GIB),
                logprobs_mode="processed_logprobs",
                worker_extension_cls="actor.worker_extension.WorkerExtension",
                enable_prefix_caching=True,
                **_transfer_options(transport, rollout),
                **_parallel_options(rollout),
                **_lora_options(lora_rank),
                **_scheduler_options(rollout, model),
                **_sleep_options(rollout, model, model_path),
            )
        self.tokenizer = self.llm.get_tokenizer()
        logger.info(
            "rollout worker %d: engine ready in %.1fs", worker_index, time.perf_counter() - start
        )

    def ready(self) -> int:
        """Returns once the engine is up (Ray calls it to wait for start-up)."""
        return self.weight_version

    def generate(self, requests: list[RolloutRequest], min_version: int = 0) -> list[Completion]:
        """Sample one completion per seed of every request, in request then seed order."""
        order = {request.request_id: i for i, request in enumerate(requests)}
        stream = self.generate_stream(requests, min_version)
        groups = [group for finished in stream for group in finished]
        groups.sort(key=lambda group: order[group[0].request_id])
        return [c for group in groups for c in group]

    def generate_stream(
        self, requests: list[RolloutRequest], min_version: int = 0
    ) -> Iterator[list[list[Completion]]]:
        """Yield requests' groups (their G completions, in seed order) as soon as all of a
        group has finished: the fleet streams them to the sandbox while the rest generate.
        Refuses (:class:`StaleWeightsError`) when the engine's weights are older than
        ``min_version``: it would sample from the base model after a silent restart.
        """
        self._check_awake()
        if self.weight_version < min_version:
            raise StaleWeightsError(
                f"rollout worker {self.worker_index} serves weight version "
                f"{self.weight_version}, the fleet requires {min_version}"
            )
        engine = self.llm.llm_engine
        self._calls += 1
        by_id = {}
        adapter = self.receiver.adapter()
        for request in requests:
            prompt = {"prompt_token_ids": list(request.prompt_token_ids)}
            for index, seed in enumerate(request.seeds):
                engine_id = f"{self._calls}:{request.request_id}:{index}"
                params = self._sampling_params(seed, request.temperature)
                engine.add_request(engine_id, prompt, params, lora_request=adapter)
                by_id[engine_id] = (request, index)
        pending = {request.request_id: len(request.seeds) for request in requests}
        done: dict[str, list[Completion]] = {}
        while engine.has_unfinished_requests():
            finished = []
            for output in engine.step():
                if not output.finished or output.request_id not in by_id:
                    continue  # (a request of an earlier call abandoned mid-stream)
                request, index = by_id[output.request_id]
                completion = _to_completion(
                    request, index, output, self.weight_version, self.tokenizer
                )
                group = done.setdefault(request.request_id, [])
                group.append(completion)
                if len(group) == pending[request.request_id]:
                    finished.append(sorted(done.pop(request.request_id), key=_SAMPLE_INDEX))
            if finished:
                yield finished

    def _sampling_params(self, seed: int, temperature: float | None = None):
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        return SamplingParams(
            output_kind=RequestOutputKind.FINAL_ONLY,  # one output per request, when finished
            n=1,
            seed=seed,
            temperature=self.config.temperature if temperature is None else temperature,
            top_p=self.config.top_p,
            max_tokens=self.config.max_new_tokens,
            min_tokens=self.config.min_new_tokens,
            ignore_eos=self.config.ignore_eos,
            logprobs=0,
            stop=list(self.config.stop) or None,
            include_stop_str_in_output=True,
        )

    def update_weights(self, update: WeightUpdate) -> dict[str, float]:
        """Load new weights into the live engine through the transport's receiver, and forget
        cached prefixes (they hold the old weights' keys and values)."""
        if update.transport != self.receiver.name:
            raise ValueError(
                f"rollout worker {self.worker_index} receives {self.receiver.name} updates, "
                f"got {update.transport}"
            )
        if "weights" in self._asleep:
            raise RuntimeError(
                f"rollout worker {self.worker_index}: a weight update must reach awake weights "
                "(wake(['weights']) first)"
            )
        started_at, start = time.time(), time.perf_counter()
        loaded = self.receiver.receive(self.llm, update)
        self.llm.reset_prefix_cache()
        self.weight_version = update.version
        self._discarded = False
        return {
            **loaded,
            "seconds": time.perf_counter() - start,
            "version": float(update.version),
            "started_at": started_at,  # wall clock: lets a caller on this host time the dispatch
        }

    def sleep(self, level: int) -> float:
        """Let go of the engine's device memory while the learner on the same GPU steps
        (``rollout.colocate``): at level 1 its KV cache, at level 2 its weights too; the
        seconds it took."""
        start = time.perf_counter()
        self.llm.sleep(level=level)
        self._asleep = {"weights", "kv_cache"}
        self._discarded = level >= 2
        return time.perf_counter() - start

    def wake(self, tags: list[str] | None = None) -> float:
        """Take back what :meth:`sleep` let go of: ``["weights"]`` before a weight update (it
        must reach resident weights), ``["kv_cache"]`` after it (allocated once the update's
        buffers are gone), None for both. The seconds it took (0 when awake already)."""
        wanted = self._asleep & set(tags or self._asleep)
        if not wanted:
            return 0.0
        start = time.perf_counter()
        self.llm.wake_up(sorted(wanted))
        self._asleep -= wanted
        if not self._asleep and self._discarded:
            # Level 2 without an update since: what the engine holds is no model. A version
            # below every fleet's makes it refuse to generate until the fleet reloads it.
            logger.warning("rollout worker %d woke without weights", self.worker_index)
            self.weight_version = -1
        return time.perf_counter() - start

    def _check_awake(self) -> None:
        """A sleeping engine's scheduler is paused: a generation would wait for ever."""
        if self._asleep:
            raise RuntimeError(
                f"rollout worker {self.worker_index} is asleep ({sorted(self._asleep)} let "
                "go): wake it before generating"
            )

    def join_transfer(self, init_info: dict) -> None:
        """Join the ``collective`` transport's group (blocks until every member joined)."""
        self.receiver.join(self.llm, init_info)

    def score(self, samples: Sequence[TrainSample]) -> tuple[int, list[list[float]]]:
        """The engine's logprobs of fixed completions and the weight version they come from,
        by teacher forcing through prompt logprobs (raw logits, temperature 1): the parity
        probe compares them with the learner's after every push.
        """
        from vllm import SamplingParams

        self._check_awake()
        sequences = [list(s.prompt_token_ids) + list(s.completion_token_ids) for s in samples]
        params = SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=1.0)
        outputs = self.llm.generate(
            [{"prompt_token_ids": tokens} for tokens in sequences],
            params,
            use_tqdm=False,
            lora_request=self.receiver.adapter(),
        )
        logprobs = []
        for sample, tokens, output in zip(samples, sequences, outputs, strict=True):
            positions = range(len(sample.prompt_token_ids), len(tokens))
            logprobs.append([output.prompt_logprobs[i][tokens[i]].logprob for i in positions])
        return self.weight_version, logprobs


#: The ranks vLLM accepts as ``max_lora_rank``: an adapter of rank r needs the next one up.
_VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def _parallel_options(rollout: RolloutConfig) -> dict:
    tp = rollout.tensor_parallel_size
    if tp == 1:
        return {}
    return {"tensor_parallel_size": tp, "distributed_executor_backend": "mp"}


@contextlib.contextmanager
def _thread_binding(rollout: RolloutConfig) -> Iterator[None]:
    """On CPU hosts with tensor parallelism, bind each worker's OpenMP threads to its own
    contiguous share of the cores this actor may use (vLLM otherwise wants one NUMA node per
    worker), for the engine's start-up only: its workers read it then, and nothing else in
    this process should."""
    tp = rollout.tensor_parallel_size
    from vllm.platforms import current_platform

    if tp == 1 or not current_platform.is_cpu():
        yield
        return
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < tp:
        raise RuntimeError(
            f"rollout.tensor_parallel_size = {tp}: this rollout actor may use only "
            f"{len(cores)} core(s) ({cores}), one per worker is needed"
        )
    shares = [cores[i * len(cores) // tp : (i + 1) * len(cores) // tp] for i in range(tp)]
    before = os.environ.get(_BIND)
    os.environ[_BIND] = "|".join(",".join(map(str, share)) for share in shares)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(_BIND, None)
        else:
            os.environ[_BIND] = before


_BIND = "VLLM_CPU_OMP_THREADS_BIND"


def _transfer_options(transport: str, rollout: RolloutConfig) -> dict:
    """vLLM's weight-transfer engine for the transports that go through its API: ``collective``
    (NCCL on GPU, the project's gloo engine on CPU: ``actor/transfer_engine.py``) and ``ipc``
    (vLLM's CUDA IPC engine; GPU only)."""
    backend = engine_backend(transport, rollout.num_gpus)
    if backend is None:
        return {}
    from vllm.config import WeightTransferConfig

    return {"weight_transfer_config": WeightTransferConfig(backend=backend)}


def engine_backend(transport: str, num_gpus: float) -> str | None:
    """The vLLM weight-transfer backend an engine is built with for ``transport``; None for
    the transports that load through the worker extension or as LoRA adapters."""
    if transport == collective.NAME:
        return backend_for(num_gpus)
    if transport == ipc.NAME:
        return "ipc"  # vLLM's own, registered by vLLM
    return None


class _SaidOnce(logging.Filter):
    """Lets each distinct message through once."""

    def __init__(self) -> None:
        super().__init__()
        self._said: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message in self._said:
            return False
        self._said.add(message)
        return True


def _sleep_options(rollout: RolloutConfig, model: ModelConfig, model_path: str) -> dict:
    """``rollout.colocate`` on a GPU: vLLM's sleep mode (its cumem allocator, so that ``sleep``
    can hand memory back), and a ``gpu_memory_utilization`` no larger than the engine needs:
    with ``kv_cache_memory_bytes`` given, vLLM only refuses to start when less than that share
    of the card is free, and the learner on the card holds part of it. vLLM-CPU has no sleep
    mode (it refuses ``enable_sleep_mode``); its ``sleep`` and ``wake_up`` work without."""
    from vllm.platforms import current_platform

    if not rollout.colocate or current_platform.is_cpu():
        return {}
    import torch

    shape = ModelShape.from_config(json.loads((Path(model_path) / "config.json").read_text()))
    need = engine_memory(shape, model.dtype, rollout.kv_cache_gib).awake
    share = engine_share(need, torch.cuda.mem_get_info()[1], rollout.num_gpus)
    return {"enable_sleep_mode": True, "gpu_memory_utilization": share}


def engine_share(need: int, total: int, num_gpus: float) -> float:
    """The share of a card of ``total`` bytes an engine needing ``need`` bytes asks vLLM to find
    free at start: its need plus 2% of the card for what the arithmetic misses, at most its
    ``rollout.num_gpus``."""
    return round(min(num_gpus, need / total + 0.02), 4)


def _lora_options(rank: int) -> dict:
    """Engine options to serve LoRA adapters of ``rank`` (none for rank 0: no adapters)."""
    if not rank:
        return {}
    fits = [r for r in _VLLM_LORA_RANKS if r >= rank]
    if not fits:
        raise ValueError(f"vLLM serves LoRA adapters up to rank {_VLLM_LORA_RANKS[-1]}, got {rank}")
    return {"enable_lora": True, "max_lora_rank": fits[0], "max_loras": 1}


def _scheduler_options(rollout: RolloutConfig, model: ModelConfig) -> dict:
    """The engine step's token budget, and on CPU hosts no prompt split across engine steps:
    chunked prefill samples a token at the end of every partial step and rewinds the
    request's seeded generator with ``Generator.set_offset``, which CPU generators lack.
    Unchunked, a prompt that does not fit a step's budget waits for the next one whole, so the
    budget must hold the longest sequence. (vLLM warns that the model "does not officially
    support disabling chunked prefill"; the parity probe checks the logprobs still match.)
    """
    from vllm.platforms import current_platform

    budget = rollout.max_num_batched_tokens or None
    if not current_platform.is_cpu():
        return {"max_num_batched_tokens": budget} if budget else {}
    return {
        "enable_chunked_prefill": False,
        "max_num_batched_tokens": max(budget or _CPU_STEP_TOKENS, model.max_model_len),
    }


#: vLLM's own default token budget of an engine step on CPU hosts (``LLM`` class).
_CPU_STEP_TOKENS = 4096


def _to_completion(
    request: RolloutRequest, index: int, output, weight_version: int, tokenizer
) -> Completion:
    """A finished vLLM request as a :class:`Completion` whose ``text`` is the decode of its
    ``token_ids``, not vLLM's output text: on a stop string vLLM cuts the text at the string's
    end while the last token may run past it, and the learner trains on the tokens the model
    sampled. Special tokens are skipped, as vLLM does."""
    sample = output.outputs[0]
    token_ids = list(sample.token_ids)
    logprobs = [step[token].logprob for step, token in zip(sample.logprobs, token_ids, strict=True)]
    return Completion(
        request_id=request.request_id,
        sample_index=index,
        prompt_token_ids=list(request.prompt_token_ids),
        token_ids=token_ids,
        sampler_logprobs=logprobs,
        text=tokenizer.decode(
            token_ids, skip_special_tokens=True, clean_up_tokenization_spaces=False
        ),
        finish_reason=str(sample.finish_reason),
        weight_version=weight_version,
        temperature=request.temperature,
    )
