"""The ``lora_adapter`` transport's wire format: only the LoRA adapter travels
(``learner.lora.export = "adapter"``), a few MB a step instead of the whole model.

An update's payload is the path of a directory holding one weight version's adapter in peft's
format, on a file system every rollout node can read (the run directory by default).

Sender (``learner/senders.py``): the learner saves the adapter to ``<adapter_dir>/v{version:06d}``,
one directory per weight version and never overwritten, so an engine still loading version k is
not handed half of version k + 1. The one just written and the one before it are kept (an
engine may still be reading the previous one); older ones go, and so do newer ones, which a
resumed run (its version back at the checkpoint's) or an overwritten one left behind.

Receiver (``actor/receivers.py``): the engine (started with LoRA enabled,
``Config.served_lora_rank``) serves the adapter as a vLLM ``LoRARequest`` named in every
request from then on, with a new adapter id per version so vLLM never serves a cached copy of
an older one. Nothing is loaded at receive time: vLLM reads the adapter with the first request
that names it.
"""

from __future__ import annotations

NAME = "lora_adapter"
