"""What the LM head's autograd function buys: ``python -m learner.bench.lm_head``.

Runs one micro-batch of the LM head + log-softmax forward and backward (``rows`` hidden states,
``chunk`` rows at a time) through each path of ``learner/logprobs.py``: the checkpointed
module path (``checkpoint``) and the autograd function of ``learner/lm_head.py``
(``function``), and prints one JSON line per path and chunk: the peak of the bytes allocated
during forward + backward and still alive (all devices; the weight and the hidden states,
allocated before, are not counted, their gradients are) and the median time.

Live bytes are counted by a ``TorchDispatchMode`` that sees every tensor an operator returns
and a finaliser on each storage, so the count is the same on CPU (whose allocator keeps no
statistics) and CUDA.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import weakref
from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from learner.logprobs import _head_in_chunks


class LiveBytes(TorchDispatchMode):
    """Bytes of the storages that operators allocate inside the mode and that are alive,
    and their peak."""

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self._seen: set[int] = set()
        self._before: set[int] = set()  # storages an operator read before any returned them

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        for leaf in tree_leaves((args, kwargs)):
            if isinstance(leaf, Tensor) and leaf.untyped_storage().data_ptr() not in self._seen:
                self._before.add(leaf.untyped_storage().data_ptr())
        out = func(*args, **(kwargs or {}))
        for leaf in tree_leaves(out):
            if isinstance(leaf, Tensor):
                self._track(leaf.untyped_storage())
        return out

    def _track(self, storage: torch.UntypedStorage) -> None:
        key = storage.data_ptr()
        if key in self._seen or key in self._before or storage.nbytes() == 0:
            return  # a view of a storage already counted, or of one allocated before the mode
        self._seen.add(key)
        self.live += storage.nbytes()
        self.peak = max(self.peak, self.live)
        weakref.finalize(storage, self._free, key, storage.nbytes())

    def _free(self, key: int, nbytes: int) -> None:
        self._seen.discard(key)
        self.live -= nbytes


def _step(
    head: nn.Linear, hidden: Tensor, targets: Tensor, chunk: int, entropy: bool, plain: bool
) -> None:
    """Forward and backward of the logprobs (and entropies) of ``targets``, gradients cleared."""
    hidden.grad = None
    head.weight.grad = None
    logp, ent = _head_in_chunks(head, hidden, targets, 1.0, chunk, entropy, plain)
    loss = logp.sum() - (0.01 * ent.sum() if entropy else 0.0)
    loss.backward()


def measure(run: Callable[[], None], repeats: int) -> tuple[int, list[float]]:
    """(peak live bytes of one ``run``, the time of it and of ``repeats`` more). The counter's
    own cost is a few Python calls per operator, each on a whole chunk: negligible here."""
    times = []
    with LiveBytes() as counter:
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return counter.peak, times


def _row(
    head: nn.Linear,
    chunk: int,
    path: str,
    plain: bool,
    autocast: torch.dtype | None,
    args: argparse.Namespace,
) -> dict:
    """One path's measurement at one chunk size."""
    rows = chunk * args.chunks_per_batch
    hidden = torch.randn(rows, head.in_features, requires_grad=True)
    targets = torch.randint(0, head.out_features, (rows,))

    def run() -> None:
        with torch.autocast("cpu", dtype=autocast or torch.float32, enabled=bool(autocast)):
            _step(head, hidden, targets, chunk, args.entropy, plain)

    peak, times = measure(run, args.repeats)
    return {
        "path": path,
        "chunk": chunk,
        "rows": rows,
        "entropy": args.entropy,
        "autocast": str(autocast).removeprefix("torch.") if autocast else None,
        "peak_live_mib": round(peak / 2**20),
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
        "--paths", nargs="+", choices=["checkpoint", "function"], default=["checkpoint", "function"]
    )
    parser.add_argument("--entropy", action="store_true", help="the entropy bonus in the loss")
    parser.add_argument("--float32", action="store_true", help="no bf16 autocast")
    parser.add_argument("--repeats", type=int, default=0, help="timed runs after the measured")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    head = nn.Linear(args.hidden, args.vocab, bias=False)
    autocast = None if args.float32 else torch.bfloat16
    for chunk in args.chunks:
        for path in args.paths:
            plain = path == "function"
            print(json.dumps(_row(head, chunk, path, plain, autocast, args)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
