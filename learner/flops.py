"""How much of the machine a learner step uses: model FLOPs over a peak measured on the spot.

Model FLOPs of one ``train_step`` (the formula docs/benchmarks.md gives, with ``N`` matmul
parameters, ``layers`` layers of attention width ``d_attn``): ``6 N T`` (``4 N T`` with LoRA) over
the ``T`` real tokens plus three times the causal attention forward, ``2 layers d_attn S^2`` per
sequence of length ``S``; a forward without gradient is ``2 N T`` plus the attention forward.
Padding is not counted, so utilisation falls when a batch is badly packed.

With ``learner.share_prompts`` each distinct prompt runs once: a sequence is then a span
``(context, tokens)``, ``tokens`` positions run after ``context`` cached ones (a prompt is
``(0, P)``, each completion ``(P, C)``), and its attention term is ``(context + tokens)^2 -
context^2``. ``train/mfu`` counts the FLOPs the step *needs* (each distinct prompt once, whatever
the path), so that runs with different options compare; ``train/model_tflop`` what the path ran.

The peak is the best of a few large square matrix products in the step's compute dtype, on the
same device and threads: what this machine really reaches.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence

import torch

from common.config import LearnerConfig
from common.types import TrainSample
from learner.batching import prompt_groups, sample_length
from learner.policy import DTYPES, base_model_of

Span = int | tuple[int, int]  # a whole sequence's length, or (cached context, tokens run)


def spans(samples: Sequence[TrainSample], share_prompts: bool) -> list[Span]:
    """What the model runs for ``samples``: whole rows, or with shared prompts each distinct
    prompt once and every completion after it."""
    if not share_prompts:
        return [sample_length(s) for s in samples]
    prompts = [len(samples[group[0]].prompt_token_ids) for group in prompt_groups(samples)]
    return prompts + [(len(s.prompt_token_ids), len(s.completion_token_ids)) for s in samples]


def matmul_parameters(model) -> int:
    """Parameters that take part in a matrix product: all but a separate input embedding."""
    base = base_model_of(model)
    embedding = base.get_input_embeddings().weight
    head = base.get_output_embeddings()
    total = sum(p.numel() for n, p in base.named_parameters() if "lora_" not in n)
    tied = head is not None and head.weight.data_ptr() == embedding.data_ptr()
    return total if tied else total - embedding.numel()


def step_flops(
    matmul_params: int,
    layers: int,
    d_attn: int,
    lengths: Sequence[Span],
    lora: bool = False,
    reference: bool = False,
) -> float:
    """Model FLOPs of one step over sequences of ``lengths`` tokens (module docstring)."""
    attention = _attention(layers, d_attn, lengths)
    flops = (4.0 if lora else 6.0) * matmul_params * _tokens(lengths) + 3.0 * attention
    if reference:
        flops += forward_flops(matmul_params, layers, d_attn, lengths)
    return flops


def forward_flops(matmul_params: int, layers: int, d_attn: int, lengths: Sequence[Span]) -> float:
    """Model FLOPs of one forward pass (no gradient) over sequences of ``lengths`` tokens."""
    return 2.0 * matmul_params * _tokens(lengths) + _attention(layers, d_attn, lengths)


def _span(length: Span) -> tuple[int, int]:
    return (0, length) if isinstance(length, int) else length


def _tokens(lengths: Sequence[Span]) -> int:
    return sum(_span(s)[1] for s in lengths)


def _attention(layers: int, d_attn: int, lengths: Sequence[Span]) -> float:
    """Scores and mixing, causal (half of the square), forward."""
    squares = sum((c + t) ** 2 - c * c for c, t in map(_span, lengths))
    return 2.0 * layers * d_attn * squares


def model_config_shape(model) -> tuple[int, int, int]:
    """(matmul parameters, layers, attention width) of an HF decoder (under peft or not)."""
    config = base_model_of(model).config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    width = config.num_attention_heads * head_dim
    return matmul_parameters(model), config.num_hidden_layers, width


def learner_peak_flops(config: LearnerConfig, cpu_size: int = 0) -> float:
    """:func:`peak_flops` where the learner of ``config`` computes: its dtype, on its GPU or
    with its CPU threads; 0 when its GPU is not on this host. ``cpu_size``: the largest
    products on CPU (0: :func:`peak_flops`'s default; smaller where they are slow)."""
    dtype = DTYPES[config.dtype]
    if config.num_gpus > 0:
        return peak_flops(torch.device("cuda"), dtype) if torch.cuda.is_available() else 0.0
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, int(config.num_cpus)))
    try:
        return peak_flops(torch.device("cpu"), dtype, cpu_size)
    finally:
        torch.set_num_threads(threads)


#: The largest products for ``train/mfu``'s peak on CPU: a fraction of a second where the bench's
#: 4096 takes up to a minute, at the same FLOP/s (docs/benchmarks.md).
MFU_CPU_SIZE = 1024


@functools.cache
def _cached_peak(device: str, dtype: str, threads: int) -> float:
    """One measurement per process and setting."""
    config = LearnerConfig(dtype=dtype, num_gpus=float(device == "cuda"), num_cpus=float(threads))
    return learner_peak_flops(config, MFU_CPU_SIZE)


def mfu_peak_flops(config: LearnerConfig, device: torch.device) -> float:
    """The peak ``train/mfu`` divides by, per rank: ``learner.peak_tflops``, or measured once
    per process on ``device`` in the compute dtype (0 when it cannot be)."""
    if config.peak_tflops > 0:
        return config.peak_tflops * 1e12
    return _cached_peak(device.type, config.dtype, max(1, int(config.num_cpus)))


#: On CPU the products grow from 256 rows until one takes this long (or reaches the size asked):
#: a CPU without bf16 instructions multiplies bf16 so slowly that 4096-wide products take minutes.
CPU_PRODUCT_S = 0.2


def peak_flops(device: torch.device, dtype: torch.dtype, size: int = 0, repeats: int = 3) -> float:
    """FLOP/s of the best of ``repeats`` ``size x size`` matrix products in ``dtype`` on
    ``device`` (8192 on GPU; on CPU up to 4096, less where a product would take over
    :data:`CPU_PRODUCT_S`: :func:`cpu_product_size`), after one warm-up product."""
    cuda = device.type == "cuda"
    size = (size or 8192) if cuda else cpu_product_size(dtype, size or 4096)
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    times = []
    for _ in range(repeats + 1):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        torch.mm(a, b)
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return 2.0 * size**3 / min(times[1:])  # the first is the warm-up


def cpu_product_size(dtype: torch.dtype, largest: int) -> int:
    """The smallest of 256, 512, ... ``largest`` whose CPU product in ``dtype`` takes at least
    :data:`CPU_PRODUCT_S` (each size timed on its second product: the first pays the kernel's
    set-up), so a peak takes seconds on any CPU and the products stay large where it is fast."""
    size = min(256, largest)
    while size < largest:
        a = torch.randn(size, size, dtype=dtype)
        torch.mm(a, a)
        start = time.perf_counter()
        torch.mm(a, a)
        if time.perf_counter() - start >= CPU_PRODUCT_S:
            break
        size = min(2 * size, largest)
    return size
