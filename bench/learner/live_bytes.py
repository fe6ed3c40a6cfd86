"""Bytes of live tensors, counted on any device: the CPU's stand-in for CUDA's allocator counter.

CUDA's caching allocator counts every byte torch has allocated and not freed
(``max_memory_allocated``); the CPU has no such counter, and the process's resident set mixes
tensors with the interpreter, libraries and the allocator's free lists. :class:`LiveTensorBytes`
counts what the CUDA counter counts at the level of tensors: every storage alive in the
process, from the moment an operator returns it to the moment its last reference goes. Views
share their base's storage and count once; a storage resized in place is recounted.

What it sees: every tensor alive when counting starts (found by walking the garbage collector's
objects: parameters, buffers, the reference, optimiser state), and every tensor an operator
returns while counting (a ``TorchDispatchMode``: activations, what autograd saves, gradients,
optimiser state and temporaries, checkpointed recomputation). What it does not see, and CUDA's
counter does: scratch memory a kernel allocates and frees inside one operator (cuBLAS and
attention workspaces), and the allocator's rounding of each block up to 512 bytes. What neither
sees: the caching allocator's reserved-but-free memory and fragmentation, which is what an
out-of-memory error actually runs into (``memory_reserved``), and the CUDA context.

torch ships a tracker of the same kind (``torch.distributed._tools.mem_tracker.MemTracker``);
it keeps one peak per module, with no reset, so a phase that is not a module (the optimiser
step, the LM head of ``learner/logprobs.py``) would need its private snapshot. This one is a
counter with a resettable peak, the interface :class:`~bench.learner.phases.PhaseMemory` reads.
"""

from __future__ import annotations

import gc
import weakref

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

#: Tensor types whose operators run as they are (no ``__torch_dispatch__`` of their own).
_PLAIN = (torch.Tensor, torch.nn.Parameter)


class LiveTensorBytes(TorchDispatchMode):
    """A counter of live tensor bytes on ``device`` with a resettable peak; count inside
    ``with counter:``. The first ``with`` also counts the tensors alive at that moment."""

    def __init__(self, device: torch.device | str = "cpu") -> None:
        super().__init__()
        self.device = torch.device(device)
        self.live = 0  # bytes of the storages counted and not yet freed
        self.high = 0  # the most ``live`` has been since the last reset
        self._sizes: dict[int, int] = {}  # id(storage) -> bytes counted for it
        self._refs: dict[int, weakref.ref] = {}
        self._resize = None
        self._started = False

    def reset(self) -> None:
        """Restart the peak at the bytes live now."""
        self.high = self.live

    def peak(self) -> int:
        """The most bytes live at once since the last :meth:`reset` (or since counting began)."""
        return self.high

    def count(self, tensor: torch.Tensor) -> None:
        """Count ``tensor``'s storage (once, however many tensors view it) until it is freed; a
        tensor subclass (a quantised optimiser state, a DTensor) counts its inner tensors."""
        if hasattr(tensor, "__tensor_flatten__"):
            names, _ = tensor.__tensor_flatten__()
            for inner in (getattr(tensor, name) for name in names):
                if isinstance(inner, torch.Tensor):  # not the metadata some subclasses list
                    self.count(inner)
            return
        if tensor.device.type != self.device.type or tensor.layout != torch.strided:
            return  # another device's, or sparse (no storage of its own)
        if isinstance(tensor, FakeTensor):
            return  # torch.compile's stand-ins (alive in the process after a compile): no memory
        storage = tensor.untyped_storage()
        key = id(storage)
        if key in self._sizes:
            self._recount(key, storage.nbytes())
            return
        # torch keeps one Python object per storage while any tensor holds it, so its weak
        # reference dies with the memory
        self._refs[key] = weakref.ref(storage, lambda _, key=key: self._free(key))
        self._sizes[key] = 0
        self._recount(key, storage.nbytes())

    def _recount(self, key: int, nbytes: int) -> None:
        self.live += nbytes - self._sizes[key]
        self._sizes[key] = nbytes
        self.high = max(self.high, self.live)

    def _free(self, key: int) -> None:
        self.live -= self._sizes.pop(key, 0)
        self._refs.pop(key, None)

    def __enter__(self) -> LiveTensorBytes:
        if not self._started:
            self._started = True
            self._count_existing()
        self._watch_resize()
        return super().__enter__()

    def __exit__(self, *exc) -> None:
        torch.UntypedStorage.resize_ = self._resize
        super().__exit__(*exc)

    def _count_existing(self) -> None:
        gc.collect()  # unreachable tensors would be counted until the next collection
        for obj in gc.get_objects():
            # type(), not isinstance: a lazy module proxy would answer with a warning
            if issubclass(type(obj), torch.Tensor):
                self.count(obj)
        self.high = self.live

    def _watch_resize(self) -> None:
        """``UntypedStorage.resize_`` (FSDP2 frees and refills its gathered parameters so) is
        not an operator the mode sees: recount a storage it resizes."""
        self._resize = resize = torch.UntypedStorage.resize_
        counter = self

        def counted_resize(storage, size):
            result = resize(storage, size)
            if id(storage) in counter._sizes:
                counter._recount(id(storage), storage.nbytes())
            return result

        torch.UntypedStorage.resize_ = counted_resize

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if any(issubclass(t, FakeTensor) for t in types):
            # shapes only, no memory: DTensor works out its shardings on fake tensors
            return func(*args, **(kwargs or {}))
        if any(t not in _PLAIN for t in types):
            return NotImplemented  # a tensor subclass: it unwraps, its inner operators come back
        result = func(*args, **(kwargs or {}))
        for leaf in tree_leaves(result):
            if isinstance(leaf, torch.Tensor):
                self.count(leaf)
        return result
