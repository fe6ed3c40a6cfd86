"""The configuration reference (docs/configuration.md), generated from the pydantic schema.

Every table row is read from :class:`common.config.Config`: the key, its type and bounds, its
default and the field's ``description``, so a renamed key, a new default or a new field shows up
the next time the reference is generated, and ``tests/unit/test_config_reference.py`` fails while
the committed file is stale. Regenerate with::

    python -m common.config.reference > docs/configuration.md

``NOTES`` holds what the README's hand-written reference said beyond the schema's descriptions
(units, measurements, why a default is what it is); each note is appended to its field's
description, and the test checks that every note names a field that exists.
"""

from __future__ import annotations

import importlib
import re
import types
import typing
from collections.abc import Iterator
from typing import Any

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from common.config import MOVED_KEYS, Config

REGENERATE = "python -m common.config.reference > docs/configuration.md"

INTRO = f"""\
<!-- Generated from the pydantic schema (common/config/) by common/config/reference.py:
     do not edit by hand; regenerate with `{REGENERATE}`. -->

# Configuration reference

A run is configured by one TOML file (`python -m launch.train --config FILE`) plus overrides on
the command line: every key below can be given as `--section.key value`, e.g.
`--rollout.batch_size 256`; lists and tables are JSON (`--rollout.stop '["\\n"]'`,
`--reward.terms.scorer.weight 0.2`). Keys left out take the defaults below.

Each TOML section is a pydantic model that refuses unknown keys; the whole configuration is
validated before any actor starts, and a refusal names the field and the reason:

```
error: invalid configuration:
  rollout: batch_size (12) must be a multiple of group_size (8): advantages are normalised per group
```

The resolved configuration is saved as `<run>/config.toml` with every run (rerun it with
`--config runs/NAME/config.toml`). Units are in the key's name (`_s` seconds, `_mb`/`_mib`
megabytes/mebibytes, `_gib` gibibytes, `_tokens` tokens); "steps" are training steps unless a
key says optimiser steps. The shipped configs in `configs/` set only what differs from these
defaults.
"""

# Where a section's subject is explained at length.
SECTION_LINKS = {
    "data": "formats, splits, templates and curricula: [datasets.md](datasets.md)",
    "eval": "pass@k during and after training: [datasets.md](datasets.md#evaluation)",
    "episode": "multi-turn episodes: [episodes.md](episodes.md)",
    "selfplay": "the saboteur and self-play rounds: [selfplay.md](selfplay.md)",
    "sandbox": "isolation, test forms and measurements: [sandbox.md](sandbox.md)",
    "reward": "the term contract and the built-in terms: [rewards.md](rewards.md)",
    "advantage": "baselines: [rewards.md](rewards.md#baselines); code: `algorithm/advantage/`",
    "learner.lora": "the LoRA demo: [benchmarks.md](benchmarks.md#lora-demo)",
    "async": "the pipeline: [training.md](training.md#asynchronous-mode)",
    "weights": "transports: [cluster.md](cluster.md#weight-transports)",
    "ray": "the cluster and its ports: [cluster.md](cluster.md), [network.md](network.md)",
}

# What the schema's descriptions leave out; appended to the field's description.
NOTES = {
    "run.output_dir": "where run directories (and built-in models) go; on a cluster a file "
    "system the driver and every learner node see (checkpoints are written by the learner, "
    "metrics by the driver)",
    "run.seed": "seeds prompt order, sampling seeds and the learner",
    "run.steps": "training steps",
    "run.checkpoint_every": "Otherwise every N steps and at the end; also on SIGTERM or Ctrl-C "
    "(the current step finishes first)",
    "run.max_masked_steps": "The checkpoint is saved at the last of those steps (the policy did "
    "not change in them) and one line names the steps, the cause and the `--resume` command",
    "run.plot": "write `reward_curve.png` at the end",
    "run.save_rollouts": "(the records: [training.md](training.md#rollout-records))",
    "model.path": "`builtin:tiny` is built offline on the driver's node only; on a cluster give "
    "a hub name or a path every node can read",
    "model.dtype": "dtype the vLLM engines serve in (and the learner exports)",
    "model.max_model_len": "prompt + completion tokens per sequence",
    "data.format": "`auto`: detected per row",
    "data.split": "MBPP's task ids: `train` 601-974, `test` 11-510, `validation` 511-600, "
    "`prompt` 1-10",
    "data.curriculum": "prompt sampling: `uniform`, `failure_focused` (problems the model "
    "sometimes fails), `easy_to_hard`",
    "eval.every": "(`eval/pass@k` metrics)",
    "eval.split": "held-out split",
    "eval.k": "the k of pass@k (each at most `n`)",
    "rollout.num_actors": "vLLM engines (Ray actors); independent of `sandbox.num_workers`, and "
    "resizable while a run goes on (`python -m launch.scale`)",
    "rollout.batch_size": "a multiple of `group_size`",
    "rollout.group_size": "(at least 2: a group of one has no baseline)",
    "rollout.max_new_tokens": "completion length cap",
    "rollout.temperature": "sampling temperature (the learner divides its logits by the same)",
    "rollout.top_p": "nucleus sampling",
    "rollout.kv_cache_gib": "(per engine, GiB)",
    "rollout.num_cpus": "CPUs per rollout actor",
    "rollout.num_gpus": "GPUs per rollout actor",
    "rollout.enforce_eager": "skip graph capture (faster start-up, slower decode on GPU)",
    "rollout.max_num_batched_tokens": "vLLM's default is 4096 on CPU. The floor is there "
    "because vLLM's CPU sampler cannot rewind a seeded request's generator after a partial "
    "prefill; a batch whose prompts exceed the budget is prefilled over several steps",
    "rollout.engine_process": "`actor` measured ~1.4x faster generation on 2 vCPUs (13.6 s to "
    "9.4-9.6 s on the benchmark); `separate` not measured here (no GPU)",
    "rollout.tensor_parallel_size": "At least one GPU or core per worker; with the collective "
    "transport every worker is a member of the transfer group. Tested on CPU (2 workers); not "
    "run on GPU here",
    "episode.feedback_chars": "also on the failing test shown",
    "sandbox.num_workers": "long-lived sandbox worker processes (each locks ~1 MiB with "
    "`pin_hot_pages`)",
    "sandbox.timeout_s": "(all its tests)",
    "sandbox.memory_mb": "address-space limit of an execution",
    "sandbox.max_output_bytes": "stdout/stderr cap of an execution of a function problem",
    "sandbox.cache": "cache results by hash(code, tests)",
    "sandbox.num_cpus": "CPUs reserved for the sandbox actor",
    "sandbox.pin_hot_pages": "Measured 7.8-8.0x to 9.1-10.1x over one interpreter per "
    "execution in the sandbox bench. RLIMIT_MEMLOCK is often 8 MiB for all of a user's "
    "processes (~7 workers): raise `ulimit -l` before `ray start` for more "
    "([sandbox.md](sandbox.md#pinned-hot-pages))",
    "sandbox.zygote_loop": "The C loop writes only its stack between forks, where the Python "
    "loop copied ~20 pages per execution: zygote CPU 0.50-0.57 to 0.40 ms per execution. It "
    "is built into `~/.cache/grpo-code` (~1 s once per node and version); without a compiler "
    "and the interpreter's headers, or without a PID namespace, the Python loop runs and the "
    "pool's log line says why",
    "sandbox.cpu_affinity": "Counting from the last because vLLM-CPU's OpenMP binding takes "
    "CPUs from the first. Pinned, the pool spent 12-24% less CPU per execution on 2 vCPUs "
    "([benchmarks.md](benchmarks.md#sandbox-pool-vs-one-interpreter-per-execution)); on a "
    "node shared with processes pinned to the same CPUs, give a list of free CPUs or `none`",
    "reward.terms.<name>.weight": "the term's weight in the sum",
    "reward.terms.<name>.kind": "one of `execution`, `format`, `length`, `scorer`",
    "reward.terms.scorer.options.dtype": "dtype the scorer runs in",
    "reward.terms.scorer.options.step_aggregate": "process reward: how the prefixes' scores "
    "combine (`min`: a solution is as good as its worst step)",
    "reward.terms.scorer.options.num_cpus": "CPUs of the scorer's actor",
    "reward.terms.scorer.options.num_gpus": "GPUs of the scorer's actor",
    "advantage.reward_scale": "(DGRO-style variance-aware scaling)",
    "advantage.kalman.initial_mean": "prior mean reward of a new problem",
    "advantage.dynamic_sampling": "(DAPO)",
    "advantage.tie_noise": 'With `scale = "group_std"` a noised group\'s advantages are of '
    "size 1 whatever the std, as strong as a real signal's; the std sets their size only with "
    "`none` or `batch_std`. It adds gradient variance and cost the demo reward "
    "([benchmarks.md](benchmarks.md#optimisation-options-on-the-demo)); "
    "`advantage/tie_noise_frac` is the share of groups it touched",
    "advantage.scale": "with `kalman`, `group_std` divides by max(group std, `kalman.std_floor`)",
    "advantage.max_sampling_rounds": "(with `dynamic_sampling`)",
    "advantage.low_variance_temperature": "A hotter sampler may break the tie; training at the "
    "sampled temperature keeps sampler and learner logprobs matched "
    "(`advantage/resampled_groups` counts the groups)",
    "learner.lr": "AdamW learning rate",
    "learner.lr_schedule": "Logged as `train/lr`. Use a decay with warmup for long runs or "
    "larger learning rates",
    "learner.warmup_steps": "for fresh optimiser state at a large learning rate",
    "learner.warmup_ratio": "(instead of `warmup_steps`)",
    "learner.adam_betas": "`[0.9, 0.95]` reacts faster to the shifting gradients of RL",
    "learner.adam_eps": "raise it (1e-6) if bf16 updates spike on near-zero second moments",
    "learner.weight_decay": "AdamW weight decay",
    "learner.max_grad_norm": "gradient clipping",
    "learner.kl_estimator": "the KL estimator (Schulman's k1, k2 or k3)",
    "learner.kl_control": "`adaptive` keeps the drift from the reference near a budget instead "
    "of guessing beta; `linear` is a pull that loosens as training goes. Needs `beta > 0`; "
    "the current value is `train/beta`, saved in checkpoints",
    "learner.kl_horizon": "(a step moves beta by at most 20% x samples / horizon)",
    "learner.clip_eps_low": "PPO ratio clip below 1",
    "learner.clip_eps_high": "PPO ratio clip above 1 (raise it for clip-higher, DAPO)",
    "learner.ratio_level": "`sequence` is steadier when long completions make single token "
    'ratios noisy; needs `aggregation = "seq_mean_token_mean"`',
    "learner.seq_clip_eps_low": "(sequence ratios sit much closer to 1 than token ratios)",
    "learner.aggregation": "loss aggregation: `seq_mean_token_mean` (GRPO), `token_mean` "
    "(DAPO), `seq_mean_token_sum_norm` (Dr. GRPO)",
    "learner.entropy_coef": "entropy bonus",
    "learner.logprob_chunk_tokens": "Completion tokens per chunk of the LM head and "
    "log-softmax, each chunk recomputed in backward: caps the float32 logits in memory; 0 "
    "keeps the full-vocabulary float32 logits of the micro-batch alive for backward",
    "learner.share_prompts": "The same logprobs and gradients; G = 8 on CPU: the learner step "
    "-42% with 256-token prompts ([benchmarks.md](benchmarks.md#one-learner-step))",
    "learner.ppo_epochs": "(ratio against the old policy)",
    "learner.tis_cap": "weight min(pi_old/pi_sampler, cap) on each token: corrects the engine's "
    "numerics and, in async mode, staleness",
    "learner.micro_batch_tokens": "padded tokens of one micro-batch (gradient accumulation)",
    "learner.dtype": "compute dtype (`bfloat16`: autocast, see `master_dtype`)",
    "learner.lora.enabled": "train a LoRA adapter (peft); the reference is the base with the "
    "adapter off",
    "learner.lora.rank": "LoRA rank",
    "learner.lora.alpha": "LoRA alpha",
    "learner.lora.dropout": "LoRA dropout",
    "learner.lora.target_modules": "modules that get adapters",
    "learner.lora.modules_to_save": "The merged export sends their trained copies",
    "learner.lora.export": "(`adapter`: only the adapter travels)",
    "learner.num_cpus": "also its torch threads",
    "learner.num_ranks": '(gloo on CPU, NCCL on GPU). `lora.export = "adapter"`, '
    '`reference = "precomputed"` and `compile` are not available with several ranks yet; a '
    "run resumes with the rank count it was saved with",
    "async.max_staleness": "The kept samples are corrected by the TIS weight "
    "(`learner.tis_cap`). With K = 1 the prompts drawn are the same as in synchronous mode",
    "async.learner_threads_during_rollout": "Avoids both oversubscribing the cores and leaving "
    "one idle: 1.09-1.20x the synchronous samples/s on 2 vCPUs "
    "([benchmarks.md](benchmarks.md#async-vs-sync-on-the-bench-workload)). Needs "
    "`max_staleness >= 1` and fewer threads than `learner.num_cpus`",
    "weights.transport": "`collective` needs synchronous runs (`async.max_staleness = 0`); with "
    '`learner.lora.export = "adapter"` the adapter transport is used instead (see '
    "`common/transport/`)",
    "weights.bucket_mib": "An update that fits in one bucket skips vLLM's layerwise-reload "
    "bookkeeping (2.6 instead of 7.0 ms for the demo's model); with `rollout.engine_process = "
    '"separate"` 16 MiB buckets load ~1.5x faster than one on the 45 MiB bench model '
    "(`python -m launch.bench.push`)",
    "weights.parity_probe": "The probe is the first completions of the run's first batch, fixed "
    "for the run, scored at the version just pushed",
    "ray.address": "(never another run's in-process cluster)",
    "ray.num_cpus": "(they then share the cores)",
    "ray.placement": "one bundle per learner rank and per initial rollout actor",
}


def main() -> None:
    """Print the reference; ``> docs/configuration.md`` commits it."""
    print(render(), end="")


def render() -> str:
    """The whole reference: the intro, one table per TOML section, the moved keys."""
    parts = [INTRO]
    for section, model in sections():
        parts.append(_render_section(section, model))
    parts.append(_render_moved())
    return "\n".join(parts)


def sections() -> Iterator[tuple[str, type[BaseModel]]]:
    """Every TOML table of the schema, nested ones right after their parent, by dotted name."""
    return _tables("", Config)


def field_paths() -> set[str]:
    """Every documented key, dotted (``learner.lora.rank``, ``reward.terms.<name>.weight``)."""
    return {f"{section}.{key}" for section, model in sections() for key, _ in leaf_fields(model)}


def _tables(prefix: str, model: type[BaseModel]) -> Iterator[tuple[str, type[BaseModel]]]:
    for name, info in model.model_fields.items():
        key = prefix + (info.alias or name)
        if _is_model(info.annotation):
            yield key, info.annotation
            yield from _tables(f"{key}.", info.annotation)
        elif _is_term_table(info.annotation):
            yield f"{key}.<name>", typing.get_args(info.annotation)[1]
            yield from _term_options(key)


def _term_options(key: str) -> Iterator[tuple[str, type[BaseModel]]]:
    """The built-in reward terms' options: validated by the reward section from its ``OPTIONS``
    table, not typed in the schema, so read from the module that defines that section,
    wherever it lives."""
    reward = Config.model_fields["reward"].annotation
    for kind, model in importlib.import_module(reward.__module__).OPTIONS.items():
        if model.model_fields:
            yield f"{key}.{kind}.options", model


def leaf_fields(model: type[BaseModel]) -> Iterator[tuple[str, FieldInfo]]:
    """The keys of one table, without the tables nested in it."""
    for name, info in model.model_fields.items():
        if not _is_model(info.annotation) and not _is_term_table(info.annotation):
            yield info.alias or name, info


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _is_term_table(annotation: Any) -> bool:
    args = typing.get_args(annotation)
    return typing.get_origin(annotation) is dict and len(args) == 2 and _is_model(args[1])


def _render_section(section: str, model: type[BaseModel]) -> str:
    lines = [f"## [{section}]", ""]
    if section == "reward":
        lines += [_REWARD_TERMS, ""]
    if section in SECTION_LINKS:
        lines += [f"See also {SECTION_LINKS[section]}.", ""]
    fields = list(leaf_fields(model))
    if not fields:
        return "\n".join(lines)
    lines += ["| key | type | default | meaning |", "|---|---|---|---|"]
    for key, info in fields:
        path = f"{section}.{key}"
        cells = [f"`{path}`", _type(info), _default(info), _meaning(path, info)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


_REWARD_TERMS = (
    "`reward.terms` is a table of named terms, `{execution = {weight = 1.0}}` by default (the "
    "execution reward alone). Listing terms replaces the default; each is a "
    "`[reward.terms.<name>]` table, below, and a built-in's options are "
    "`[reward.terms.<kind>.options]`, after it."
)


def _render_moved() -> str:
    lines = [
        "## Keys that moved",
        "",
        "A configuration that still uses an old key is refused with its new place, e.g. "
        "`learner.advantage_scale moved to advantage.scale`.",
        "",
        "| old key | new key |",
        "|---|---|",
    ]
    lines += [f"| `{old}` | `{new}` |" for old, new in MOVED_KEYS.items()]
    return "\n".join(lines) + "\n"


def _meaning(path: str, info: FieldInfo) -> str:
    description, note = info.description or "", NOTES.get(path, "")
    if not (description and note):
        return _cell(description or note)
    # A note in parentheses continues the description's sentence, a capitalised one starts a
    # new sentence, any other is one more clause.
    joint = " " if note[0] == "(" else ". " if note[0].isupper() else "; "
    return _cell(description + joint + note)


def _type(info: FieldInfo) -> str:
    bounds = [_bound(item) for item in info.metadata]
    text = " ".join([_type_name(info.annotation), ", ".join(b for b in bounds if b)]).strip()
    return _cell(f"`{text}`")


def _type_name(annotation: Any) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return " | ".join(f'"{arg}"' for arg in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(arg) for arg in args)
    if origin is tuple:
        return "[" + ", ".join(_type_name(arg) for arg in args) + "]"
    if origin is list:
        return f"list[{_type_name(args[0])}]"
    if origin is dict:
        return "table"
    return getattr(annotation, "__name__", str(annotation))


def _bound(item: Any) -> str:
    for kind, symbol in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
        if isinstance(item, getattr(annotated_types, kind.capitalize())):
            return f"{symbol} {_value(getattr(item, kind))}"
    return ""


def _default(info: FieldInfo) -> str:
    if info.default_factory is not None:
        return f"`{_value(info.default_factory())}`"
    if info.default is PydanticUndefined:
        return "required"
    return f"`{_value(info.default)}`"


def _value(value: Any) -> str:
    """A default as it is written in TOML."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, float) and 0 < abs(value) < 1e-2:
        mantissa, exponent = f"{value:e}".split("e")
        return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"  # 1e-4, not 0.0001
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_value(v)}" for k, v in value.items()) + "}"
    return str(value)


def _cell(text: str) -> str:
    """Markdown table cell: pipes escaped, angle brackets outside code shown, not parsed as
    HTML (``<run>/rollouts/`` would vanish)."""
    pieces = re.split(r"(`[^`]*`)", text.replace("|", "\\|"))
    return "".join(
        piece if piece.startswith("`") else piece.replace("<", "&lt;").replace(">", "&gt;")
        for piece in pieces
    )


if __name__ == "__main__":
    main()
