"""The learner's torch compute threads, narrowed while a rollout shares its CPU cores
(``async.learner_threads_during_rollout``).

The request comes from the actor's ``control`` concurrency group while ``train_step`` runs in
the default one, so it is only recorded: OpenMP thread counts belong to the calling thread, and
the training thread takes the request up between micro-batches (:meth:`ComputeThreads.apply`).
"""

from __future__ import annotations

import torch


class ComputeThreads:
    """The thread count the training thread should run with, and applying it there."""

    def __init__(self, num_cpus: float) -> None:
        # learner.num_cpus threads (at least one); 0 leaves torch's default.
        self.full = max(1, int(num_cpus)) if num_cpus > 0 else 0
        self._wanted = self.full

    def request(self, threads: int) -> None:
        """From any thread: ``threads`` from the next micro-batch on (0: the full count)."""
        self._wanted = int(threads) or self.full

    def apply(self) -> None:
        """On the training thread: run with the latest requested count."""
        wanted = self._wanted
        if wanted and wanted != torch.get_num_threads():
            torch.set_num_threads(wanted)
