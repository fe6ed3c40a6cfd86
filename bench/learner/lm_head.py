"""What the LM head's autograd function buys: ``python -m bench.learner.lm_head``.

Runs one micro-batch of the LM head + log-softmax forward and backward (``rows`` hidden states,
``chunk`` rows at a time) through each path of ``learner/logprobs.py``: the checkpointed
module path (``checkpoint``), the autograd function of ``learner/lm_head.py`` (``function``)
and that function with its softmax math compiled (``fused``, ``learner/head_kernels.py``), and
prints one JSON line per path and chunk: the peak of the bytes allocated
during forward + backward and still alive (all devices; the weight and the hidden states,
allocated before, are not counted, their gradients are) and the median time of the runs after
the first (counted, or compiling).

Live bytes are counted by ``bench/learner/live_bytes.py`` (the same count on CPU, whose
allocator keeps no statistics, and CUDA), less what was alive before the run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from bench.learner.live_bytes import LiveTensorBytes
from learner.logprobs import _head_in_chunks


def _step(
    head: nn.Linear, hidden: Tensor, targets: Tensor, chunk: int, entropy: bool, path: str
) -> None:
    """Forward and backward of the logprobs (and entropies) of ``targets``, gradients cleared."""
    hidden.grad = None
    head.weight.grad = None
    plain, fused = path != "checkpoint", path == "fused"
    logp, ent = _head_in_chunks(head, hidden, targets, 1.0, chunk, entropy, plain, fused=fused)
    loss = logp.sum() - (0.01 * ent.sum() if entropy else 0.0)
    loss.backward()


def measure(
    run: Callable[[], None], repeats: int, counted: bool = True
) -> tuple[int | None, list[float]]:
    """(peak live bytes of one ``run``, the times of 1 + ``repeats`` more). The first run is
    not timed on either path: it runs under the counter (a Python call per operator), or, for
    compiled code, which does not run under the counter (a dispatch mode), it compiles and no
    peak is counted (``counted`` False)."""
    peak = None
    if counted:
        with LiveTensorBytes() as counter:
            before = counter.live  # the weight, the hidden states: allocated before, not counted
            counter.reset()
            run()
        peak = counter.peak() - before
    else:
        run()
    return peak, [_timed(run) for _ in range(1 + repeats)]


def _timed(run: Callable[[], None]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def _row(
    head: nn.Linear,
    chunk: int,
    path: str,
    autocast: torch.dtype | None,
    args: argparse.Namespace,
) -> dict:
    """One path's measurement at one chunk size."""
    rows = chunk * args.chunks_per_batch
    hidden = torch.randn(rows, head.in_features, requires_grad=True)
    targets = torch.randint(0, head.out_features, (rows,))

    def run() -> None:
        with torch.autocast("cpu", dtype=autocast or torch.float32, enabled=bool(autocast)):
            _step(head, hidden, targets, chunk, args.entropy, path)

    head.weight.grad = None  # the last row's: its gradient counts in this row's peak too
    peak, times = measure(run, args.repeats, counted=path != "fused")
    return {
        "path": path,
        "chunk": chunk,
        "rows": rows,
        "entropy": args.entropy,
        "autocast": str(autocast).removeprefix("torch.") if autocast else None,
        "peak_live_mib": None if peak is None else round(peak / 2**20),
        "chunk_logits_mib": round(4 * chunk * head.out_features / 2**20),
        "fwd_bwd_s": round(statistics.median(times), 2),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=1536, help="Qwen2.5-1.5B's")
    parser.add_argument("--vocab", type=int, default=151936, help="Qwen2.5's")
    parser.add_argument("--chunks", type=int, nargs="+", default=[1024, 512])
    parser.add_argument(
        "--chunks-per-batch",
        type=int,
        default=2,
        help="hidden states per micro-batch, in chunks: from the second on, the head's weight "
        "gradient is alive while a chunk's logits are recomputed",
    )
    parser.add_argument(
        "--paths",
        nargs="+",
        choices=["checkpoint", "function", "fused"],
        default=["checkpoint", "function"],
        help="fused: the function with its softmax math compiled (a compiled learner's; the "
        "first run compiles, untimed)",
    )
    parser.add_argument("--entropy", action="store_true", help="the entropy bonus in the loss")
    parser.add_argument("--float32", action="store_true", help="no bf16 autocast")
    parser.add_argument(
        "--repeats", type=int, default=0, help="timed runs after the first timed one"
    )
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    head = nn.Linear(args.hidden, args.vocab, bias=False)
    autocast = None if args.float32 else torch.bfloat16
    for chunk in args.chunks:
        for path in args.paths:
            print(json.dumps(_row(head, chunk, path, autocast, args)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
