"""One learner step, measured: ``python -m bench.learner`` (its ``--help`` says what and how).

Builds a model of a public shape with random weights (no download), feeds the real
:class:`~learner.learner.Learner` a random GRPO batch with a rollout's shape and times whole
``train_step`` calls; utilisation is the step's model FLOP/s (``learner/flops.py``) over the peak
a large matrix product reaches in the same run. With ``--ranks N`` the step runs on N learner
ranks (FSDP2), one process each, spawned here.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.multiprocessing as mp

from bench.learner.phases import PhaseMemory, instrument
from bench.learner.profile import profile_step
from common.arguments import (
    OutputPathError,
    check_output_file,
    non_negative_int,
    positive_float,
    positive_int,
)
from common.config import ConfigError, LearnerConfig, LossConfig, load_config
from common.config.files import parse_value
from common.help_format import DefaultsHelpFormatter
from common.rendezvous import LOOPBACK, GroupStore
from common.types import ProcessGroupSpec, TrainSample
from learner.flops import learner_peak_flops
from learner.learner import Learner

DESCRIPTION = """\
Time one learner step on a model of a public shape with random weights (no download).

Builds the preset's model with random bf16 weights and feeds the real Learner a random GRPO
batch shaped like one rollout: PROMPTS prompts x GROUP samples of PROMPT_LEN + COMPLETION_LEN
tokens, advantages +1 / -1 so that every completion token has a gradient. It times whole train
steps: forward, backward and the AdamW step, plus the reference's forward when --beta > 0. The
learner runs on the GPU when CUDA is available, else on the CPU with --threads threads.

It answers "does my configuration fit, and how fast is it" before renting a cluster: the memory
of a step depends on shapes and dtypes, not on what the weights have learnt. It prints one JSON
object on stdout (each step's time goes to stderr)."""

EPILOG = """\
what the JSON reports:
  step_s                median time of the timed steps (--steps, after --warmup untimed ones)
  tokens_per_s          the batch's completion tokens / step_s
  peak_memory_gib       the largest phase_peak_gib, the model's build ("before") included
                        (CUDA: max_memory_allocated; CPU: bytes of live tensors,
                        bench/learner/live_bytes.py)
  peak_rss_gib          the process's peak resident set (host memory: on CPU the tensors plus
                        the interpreter, libraries and the allocator's free lists)
  state_gib             parameters + gradients + AdamW state this process holds
  model_tflop_per_step  model FLOPs of one step (learner/flops.py; padding not counted)
  achieved_tflops       model_tflop_per_step / step_s
  peak_tflops           the best of three large matrix products in the step's dtype on the
                        same device and threads, measured in this run (x the ranks)
  utilisation           achieved_tflops / peak_tflops
  mfu                   as utilisation, counting each distinct prompt once whatever the path
                        (learner.share_prompts on or off): train/mfu's FLOPs, which compare
                        across options
  phase_peak_gib        the peak inside each phase of the step (reference forward, policy
                        forward, LM head and log-softmax, backward, optimiser step; the largest
                        sets peak_memory_gib), also printed on stderr. CUDA: the allocator's
                        counter; CPU: live tensor bytes, the same tensors without CUDA's kernel
                        workspaces and 512-byte rounding (neither counts the allocator's cache)
  learner, loss         the learner config and the loss's ([algorithm.loss]) the step ran with
  memory_cap_gib        --memory-cap-gib, or 0: torch's allocator on the card was capped there
  resolved              share_prompts and compile as they ran on this device ("auto"
                        resolved: LearnerConfig.share_prompts_on, compile_on), and the
                        micro-batch token budget and checkpointed layers the learner fitted
                        (learner.memory_gib, or the card: train/micro_batch_tokens)
  profile               with --profile: one more step's wall seconds, its busy seconds (GPU
                        kernels' own time on CUDA; operators' on CPU), those per kind of work
                        (matmul, attention, fused, log_softmax, optimizer, copy, other) and
                        the 12 largest; the full operator table in FILE

With learner.offload_optimizer = "step" state_gib is in host memory, not on the card.
--memory-cap-gib N lets one large card measure a smaller one: the step runs with torch's
allocations capped at N GiB (torch.cuda.set_per_process_memory_fraction; the CUDA context is
outside it), and a learner without learner.memory_gib fits its micro-batches to N GiB.

With --ranks N each rank is a process holding 1/N of the state (gloo on CPU, NCCL on GPU); the
numbers are the slowest rank's, peak_memory_gib and state_gib the largest rank's, and "ranks"
lists every rank's step_s, peak_memory_gib and state_gib.

The learning rate is 1e-6; learner options without a flag here keep LearnerConfig's defaults.
Any option can be set as --learner.KEY VALUE or --algorithm.loss.KEY VALUE, which win over the
flags above, e.g. --learner.lora.alpha 32. Measured runs: docs/benchmarks.md, "One learner step"."""

# Shapes of public checkpoints (their config.json), for random-weight stand-ins.
PRESETS: dict[str, dict[str, Any]] = {
    "qwen2.5-1.5b": dict(
        hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
        num_attention_heads=12, num_key_value_heads=2, vocab_size=151936,
        tie_word_embeddings=True,
    ),
    "qwen2.5-7b": dict(  # Qwen2.5-7B and Qwen2.5-Coder-7B: untied, 4 kv heads
        hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
        num_attention_heads=28, num_key_value_heads=4, vocab_size=152064,
        tie_word_embeddings=False,
    ),
    "qwen2.5-coder-0.5b": dict(
        hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
        num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
        tie_word_embeddings=True,
    ),
    "bench-20m": dict(  # configs/bench.toml's model
        hidden_size=512, intermediate_size=1408, num_hidden_layers=8, num_attention_heads=8,
        num_key_value_heads=4, head_dim=64, vocab_size=128, tie_word_embeddings=True,
    ),
    "tiny": dict(  # for tests
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, vocab_size=256, tie_word_embeddings=True,
    ),
}  # fmt: skip


def build_random_model(preset: str, root: Path, layers: int | None = None) -> Path:
    """A Qwen2 model of ``preset``'s shape with random bf16 weights, saved under ``root``;
    ``layers`` decoder layers instead of the preset's (every other dimension kept)."""
    # lazy: importing learner needs only torch; transformers loads when a model is built
    from transformers import Qwen2Config, Qwen2ForCausalLM

    shape = {**PRESETS[preset], **({"num_hidden_layers": layers} if layers else {})}
    config = Qwen2Config(**shape, max_position_embeddings=32768, dtype="bfloat16")
    torch.manual_seed(0)
    with torch.device("cpu"):
        model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    path = root / preset
    model.save_pretrained(path)
    return path


def random_batch(prompts: int, group: int, prompt_len: int, completion_len: int, vocab: int):
    """TrainSamples shaped like one rollout batch; advantages alternate sign within a group."""
    generator = torch.Generator().manual_seed(0)
    samples = []
    for p in range(prompts):
        prompt = tuple(torch.randint(0, vocab, (prompt_len,), generator=generator).tolist())
        for g in range(group):
            tokens = torch.randint(0, vocab, (completion_len,), generator=generator).tolist()
            advantage = 1.0 if g % 2 == 0 else -1.0
            samples.append(
                TrainSample(prompt, tuple(tokens), (-5.0,) * completion_len, advantage, 0, p)
            )
    return samples


def peak_rss_gib() -> float:
    """The process's peak resident set so far, GiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB


def state_gib(learner) -> float:
    """GiB of parameters, gradients (one per trainable parameter, in its dtype) and optimiser
    state this process holds: local shards only when the learner is sharded."""

    def local(tensor: torch.Tensor) -> int:
        tensor = tensor.to_local() if hasattr(tensor, "to_local") else tensor
        if hasattr(tensor, "__tensor_flatten__"):  # a quantised state: its codes and scales
            names, _ = tensor.__tensor_flatten__()
            return sum(local(getattr(tensor, name)) for name in names)
        return tensor.numel() * tensor.element_size()

    total = sum(local(p) for p in learner.model.parameters())
    total += sum(local(p) for p in learner.trainable)
    for state in learner.optimizer.state.values():
        total += sum(local(v) for v in state.values() if isinstance(v, torch.Tensor) and v.dim())
    return total / 2**30


#: the flags that set an option: flag destination -> its dotted key
_FLAG_KEYS = {
    "beta": "algorithm.loss.beta",
    "dtype": "learner.dtype",
    "gradient_checkpointing": "learner.gradient_checkpointing",
    "micro_batch_tokens": "learner.micro_batch_tokens",
    "threads": "learner.num_cpus",
    "ranks": "learner.num_ranks",
}


def bench_config(args: argparse.Namespace, overrides: list) -> tuple[LearnerConfig, LossConfig]:
    """The flags' options, then ``--section.key value`` overrides on top. With ``--config`` the
    file's sections replace the flags' defaults: only the flags given (``args.given``) and the
    overrides change them, so a row measures that config's learner and loss."""
    options: dict[str, Any] = {key: getattr(args, dest) for dest, key in _FLAG_KEYS.items()}
    options["learner.lora"] = {"enabled": args.lora, "rank": args.lora_rank}
    if args.config:
        given = getattr(args, "given", set())
        options = {key: options[key] for dest, key in _FLAG_KEYS.items() if dest in given}
        lora = {"enabled": args.lora} if "lora" in given else {}
        options["learner.lora"] = lora | ({"rank": args.lora_rank} if "lora_rank" in given else {})
    else:
        options["learner.lr"] = 1e-6
    options["learner.num_gpus"] = 1.0 if torch.cuda.is_available() else 0.0  # this machine's
    # the command-line overrides come last, so they win over the flags' values
    flat = _flatten(options) + overrides
    if args.config:  # the bench has no engine: a colocated config's pairing rules do not apply
        flat = ["--rollout.colocate", "false", *flat]
    config = load_config(Path(args.config) if args.config else None, flat)
    return config.learner, config.algorithm.loss


def run(args: argparse.Namespace, overrides: list[str]) -> dict[str, Any]:
    config, loss = bench_config(args, overrides)
    ran = {"learner": config.model_dump(), "loss": loss.model_dump()}
    with tempfile.TemporaryDirectory(prefix="learner-bench-") as root:
        path = build_random_model(args.preset, Path(root), args.layers)
        if config.num_ranks == 1:
            return {**measure(args, config, loss, path, None), **ran}
        store = GroupStore(LOOPBACK)  # the ranks' store, served here while they run
        spawn_args = (args, config, loss, path, store.address, Path(root))
        mp.spawn(_rank_main, args=spawn_args, nprocs=config.num_ranks, join=True)
        ranks = [
            json.loads((Path(root) / f"rank{r}.json").read_text()) for r in range(config.num_ranks)
        ]
    slowest = max(ranks, key=lambda r: r["step_s"])
    keep = ("preset", "layers", "device", "parameters", "trainable_parameters", "samples")
    result = {key: slowest[key] for key in keep}
    result.update({key: slowest[key] for key in slowest if key not in keep})
    for key in ("peak_memory_gib", "peak_rss_gib", "state_gib"):  # the largest rank's
        result[key] = max(r[key] for r in ranks)
    result["ranks"] = [
        {key: r[key] for key in ("step_s", "peak_memory_gib", "state_gib")} for r in ranks
    ]
    return {**result, **ran}


def _rank_main(rank: int, args, config, loss, path: Path, address: str, root: Path) -> None:
    if torch.cuda.is_available():
        torch.cuda.set_device(rank)
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    group = ProcessGroupSpec(address, rank, config.num_ranks, backend)
    (root / f"rank{rank}.json").write_text(json.dumps(measure(args, config, loss, path, group)))


def cap_memory(cap_gib: float | None) -> float:
    """Cap this process's CUDA allocations at ``cap_gib`` GiB of its card (``--memory-cap-gib``);
    the GiB the cap leaves out, which the learner treats as held by another process, so that it
    fits its micro-batches to the cap as it would to a card of that size (0 without a cap)."""
    if not cap_gib:
        return 0.0
    device = torch.device("cuda", torch.cuda.current_device())
    total = torch.cuda.get_device_properties(device).total_memory / 2**30
    torch.cuda.set_per_process_memory_fraction(cap_gib / total, device)
    return total - cap_gib


def check_memory_cap(cap_gib: float | None) -> None:
    """Refuse (ConfigError, one line) a cap without CUDA or beyond the card."""
    if not cap_gib:
        return
    if not torch.cuda.is_available():
        raise ConfigError(
            "--memory-cap-gib caps torch's allocations on a CUDA card "
            "(torch.cuda.set_per_process_memory_fraction): there is none here, and a CPU "
            "learner's memory is the host's"
        )
    total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory / 2**30
    if cap_gib > total:
        raise ConfigError(f"--memory-cap-gib ({cap_gib:g}) is more than the card's {total:.1f} GiB")


def measure(args: argparse.Namespace, config, loss, path: Path, group) -> dict[str, Any]:
    """Warm-up and timed ``train_step`` calls of one learner (rank); its numbers."""
    reserve = cap_memory(args.memory_cap_gib)  # before the learner allocates anything
    learner = Learner(str(path), config, loss=loss, group=group, card_reserve_gib=reserve)
    vocab = PRESETS[args.preset]["vocab_size"]
    shape = (args.prompts, args.group, args.prompt_len, args.completion_len)
    samples = random_batch(*shape, vocab)
    phases = phase_memory(learner)
    with phases.counting():
        times = timed_steps(learner, samples, args.warmup, args.steps)
    parameters = sum(p.numel() for p in learner.model.parameters())  # global shapes
    trainable = sum(p.numel() for p in learner.trainable)
    step_s = statistics.median(times)
    tokens = len(samples) * args.completion_len
    flops = learner.model_flops(samples)
    needed = learner.model_flops(samples, share_prompts=True)
    peak = learner_peak_flops(config) * learner.ranks.size
    state = state_gib(learner)
    phases.close()
    if learner.ranks.rank == 0:
        for name, gib in phases.gib().items():
            print(f"phase {name}: peak {gib:.2f} GiB", file=sys.stderr, flush=True)
    extra = {}
    if args.profile:  # one more step, every rank (they step together); rank r > 0 to FILE.rankr
        rank = learner.ranks.rank
        table = Path(args.profile + (f".rank{rank}" if rank else ""))
        extra["profile"] = profile_step(lambda: learner.train_step(samples), learner.device, table)
    learner.ranks.close()
    return extra | {
        "preset": args.preset,
        "layers": args.layers or PRESETS[args.preset]["num_hidden_layers"],
        "device": str(learner.device),
        "parameters": parameters,
        "trainable_parameters": trainable,
        "samples": len(samples),
        "completion_tokens": tokens,
        "step_s": step_s,
        "tokens_per_s": tokens / step_s,
        "peak_memory_gib": phases.overall / 2**30,  # the phases reset CUDA's own peak counter
        "peak_rss_gib": peak_rss_gib(),
        "state_gib": state,
        "model_tflop_per_step": flops / 1e12,
        "achieved_tflops": flops / step_s / 1e12,
        "peak_tflops": peak / 1e12,
        "utilisation": flops / step_s / peak,
        "mfu": needed / step_s / peak,
        "phase_peak_gib": phases.gib(),
        "memory_cap_gib": args.memory_cap_gib or 0.0,
        "resolved": {
            "share_prompts": learner.share_prompts,
            "compile": learner.compiled,
            "micro_batch_tokens": learner.fit.tokens,
            "checkpointed_layers": learner.fit.checkpointed,
        },
    }


def timed_steps(learner: Learner, samples: list, warmup: int, steps: int) -> list[float]:
    """``warmup`` then ``steps`` train steps; the seconds of the last ``steps``."""
    times = []
    for index in range(warmup + steps):
        if learner.device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        learner.train_step(samples)
        if learner.device.type == "cuda":
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
        if index >= warmup:
            times.append(elapsed)
        if learner.ranks.rank == 0:
            print(f"step {index + 1}: {elapsed:.2f}s", file=sys.stderr, flush=True)
    return times


def phase_memory(learner: Learner) -> PhaseMemory:
    """The per-phase memory recorder of ``learner``'s device, its phases instrumented: CUDA's
    allocator counter on a GPU, the bytes of live tensors elsewhere."""
    if learner.device.type == "cuda":
        recorder = PhaseMemory.cuda(learner.device)
    else:
        recorder = PhaseMemory.live_tensors(learner.device)
    instrument(learner, recorder)
    return recorder


def _flatten(data: dict, prefix: str = "") -> list[str]:
    flat: list[str] = []
    for key, value in data.items():
        if isinstance(value, dict):
            flat += _flatten(value, f"{prefix}{key}.")
        else:
            flat += [f"--{prefix}{key}", json.dumps(value)]
    return flat


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """The flags below, and the ``--learner.key value`` overrides left over."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.learner",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=DefaultsHelpFormatter,
    )
    add = parser.add_argument
    add(
        "--preset",
        choices=sorted(PRESETS),
        default="qwen2.5-1.5b",
        help="the model's shape: qwen2.5-1.5b, qwen2.5-7b and qwen2.5-coder-0.5b are the "
        "public checkpoints' (their config.json), bench-20m is configs/bench.toml's model, tiny "
        "is for tests",
    )
    add(
        "--layers",
        type=positive_int,
        help="decoder layers instead of the preset's (hidden size, vocabulary and heads kept): "
        "the full shape's per-layer and LM-head memory, measured at a depth that fits",
    )
    add(
        "--config",
        help="take [learner] and [algorithm.loss] from this TOML file (e.g. a shipped config) "
        "instead of the defaults below; the flags given and the overrides still win",
    )
    add("--prompts", type=positive_int, default=16, help="distinct prompts in the batch")
    add("--group", type=positive_int, default=8, help="G: samples per prompt")
    add("--prompt-len", type=positive_int, default=128, help="tokens of each prompt")
    add(
        "--completion-len",
        type=positive_int,
        default=512,
        help="tokens of each completion, all trained",
    )
    _add_learner_flags(add)
    add("--steps", type=positive_int, default=2, help="timed steps; step_s is their median")
    add("--warmup", type=non_negative_int, default=1, help="untimed steps before them")
    add("--out", help="also write the JSON result to this file")
    add(
        "--memory-cap-gib",
        type=positive_float,
        metavar="N",
        help="CUDA only: run the step with torch's allocations capped at N GiB of the card "
        "(torch.cuda.set_per_process_memory_fraction), so one card measures a smaller one",
    )
    add(
        "--profile",
        metavar="FILE",
        help="run one more step under torch.profiler: its operator table to FILE, its time per "
        "kind of work in the JSON (bench/learner/profile.py)",
    )
    args, overrides = parser.parse_known_args(argv)
    args.given = _given(parser, argv)
    return args, overrides


def _add_learner_flags(add) -> None:
    """The flags that set a learner or loss option (``_FLAG_KEYS``) or LoRA."""
    add(
        "--beta",
        type=float,
        default=0.04,
        help="KL weight (algorithm.loss.beta); > 0 adds the reference's forward to every step and, "
        "without --lora, its copy of the weights to the memory",
    )
    add(
        "--dtype",
        choices=["bfloat16", "float32"],
        default="bfloat16",
        help="compute dtype (learner.dtype); bfloat16 runs under autocast over float32 master "
        "weights",
    )
    add(
        "--gradient-checkpointing",
        nargs="?",
        const="true",
        default="false",
        type=parse_value,  # as --learner.gradient_checkpointing would take it
        metavar="LAYERS",
        help="recompute activations in the backward pass: less memory, more time "
        "(learner.gradient_checkpointing: alone or 'true' every decoder layer, a number the "
        "first that many, 'auto' the fewest that fit --learner.memory_gib)",
    )
    add(
        "--micro-batch-tokens",
        type=positive_int,
        default=8192,
        help="padded-token budget of one micro-batch (learner.micro_batch_tokens)",
    )
    add("--lora", action="store_true", help="train a LoRA adapter instead of every weight")
    add("--lora-rank", type=positive_int, default=16, help="the adapter's rank, with --lora")
    add("--threads", type=positive_float, default=1.0, help="torch threads (learner.num_cpus)")
    add(
        "--ranks",
        type=positive_int,
        default=1,
        help="learner ranks (learner.num_ranks): FSDP2, one process each",
    )


def _given(parser: argparse.ArgumentParser, argv: list[str]) -> set[str]:
    """The destinations of the flags ``argv`` gives: parsed again with every default replaced
    by a marker (a parser's own defaults win over its arguments')."""
    unset = object()
    parser.set_defaults(**{action.dest: unset for action in parser._actions})
    again, _ = parser.parse_known_args(argv)
    return {dest for dest, value in vars(again).items() if value is not unset}


def main(argv: list[str] | None = None) -> int:
    args, overrides = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        for flag, value in (("--out", args.out), ("--profile", args.profile)):
            if value:  # before the steps, not after
                check_output_file(value, flag)
        check_memory_cap(args.memory_cap_gib)
        result = run(args, overrides)
    except (ConfigError, OutputPathError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0
