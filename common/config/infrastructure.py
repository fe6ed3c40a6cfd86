"""Sections for what carries a run: run (its name, length, checkpoints and records), async
(how far rollouts run ahead of the learner), weights (how they reach the engines) and ray (the
cluster the actors run on)."""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Literal

from pydantic import Field, field_validator

from common.config.base import Section


class RunConfig(Section):
    name: str = Field(
        "run",
        description="the run's directory under output_dir (a name, or a relative path such as "
        "'sweep/lr1'; not '..'), which --overwrite deletes",
    )
    output_dir: str = Field(
        "runs",
        description="where run directories (and built-in models) go, on the driver's host: "
        "learner ranks on other hosts write checkpoints on their own disks and the driver "
        "fetches them here (no shared file system needed: docs/cluster.md, Paths)",
    )
    seed: int = Field(0, description="seeds prompt order, sampling seeds and the learner")
    steps: int = Field(100, ge=1, description="training steps")
    checkpoint_every: int = Field(
        0,
        ge=0,
        description="0: only at the end of the run. Otherwise every N steps and at the end; "
        "also on SIGTERM or Ctrl-C (the current step finishes first)",
    )
    max_masked_steps: int = Field(
        3,
        ge=0,
        description="stop the run (exit status 1, a checkpoint saved) after this many steps in "
        "a row in which no completion got a reward (every one a sandbox infra error, or masked "
        "by the reward terms): such a step trains nothing, so a broken sandbox pool would "
        "otherwise burn the run's steps; 0: never stop. The checkpoint is saved at the last of "
        "those steps (the policy did not change in them) and one line names the steps, the "
        "cause and the `--resume` command",
    )
    plot: bool = Field(True, description="write `reward_curve.png` at the end")
    save_rollouts: bool = Field(
        True,
        description="every trained completion, its program, verdicts, rewards and advantage in "
        "<run>/rollouts/ (launch/loop/rollouts.py reads them) (the records: "
        "[training.md](training.md#rollout-records))",
    )
    rollouts_file_mib: float = Field(
        64, gt=0, description="a rollout file past this size is gzipped and a new one started"
    )
    rollouts_max_mib: float = Field(
        1024, gt=0, description="the oldest rollout files are deleted beyond this much in all"
    )

    @field_validator("name")
    @classmethod
    def _check_name(cls, name: str) -> str:
        parts = PurePosixPath(name).parts
        if not parts or name.startswith("/") or ".." in parts:
            raise ValueError(
                f"{name!r} is not a run name: give a directory name under run.output_dir "
                "(not empty, not absolute, no '..'), since --overwrite deletes that directory"
            )
        return name


class AsyncConfig(Section):
    max_staleness: int = Field(
        0,
        ge=0,
        description="0: synchronous, every sample on-policy; K >= 1: rollouts and rewards run "
        "up to K steps ahead of the learner (one-step-off-policy at 1), and samples more than K"
        " weight versions behind the learner are dropped (async/dropped_samples). The kept "
        "samples are corrected by the TIS weight (`algorithm.loss.tis_cap`). With K = 1 the "
        "prompts drawn are the same as in synchronous mode",
    )
    learner_threads_during_rollout: int = Field(
        0,
        ge=0,
        description="async mode, learner and engines on the same CPU cores: the learner's torch"
        " threads while the next batch is being generated; it returns to learner.num_cpus as "
        "soon as the batch is in. 0: always learner.num_cpus. Avoids both oversubscribing the "
        "cores and leaving one idle "
        "([benchmarks.md](benchmarks.md#async-vs-sync-on-the-bench-workload)). Needs "
        "`max_staleness >= 1` and fewer threads than `learner.num_cpus`",
    )


class WeightsConfig(Section):
    transport: Literal["cpu_safetensors", "collective", "ipc"] = Field(
        "cpu_safetensors",
        description="how weights reach the engines: bounded safetensors buckets through Ray's "
        "object store (any host, across nodes); 'collective': learner rank 0 broadcasts to "
        "every engine worker in one process group through vLLM's weight-transfer API (NCCL on "
        "GPU, gloo on CPU); 'ipc': each engine reads the weights from the learner rank on its "
        "own GPU by CUDA IPC handles, through the same API (rollout.colocate on GPUs only; the "
        "default there when this key is not set); `collective` needs synchronous runs "
        '(`async.max_staleness = 0`); with `learner.lora.export = "adapter"` the adapter '
        "transport is used instead (see `common/transport/`)",
    )
    bucket_mib: float = Field(
        16,
        gt=0,
        description="bound on one bucket of a weight update: each engine decodes and loads one "
        "bucket at a time, so a push never holds a second copy of the whole model there (and "
        "small buckets load faster: docs/benchmarks.md, weight push). An update that fits in "
        "one bucket skips vLLM's layerwise-reload bookkeeping; with `rollout.engine_process = "
        '"separate"` smaller buckets load faster (`python -m bench.launch.push`)',
    )
    push_timeout_s: float = Field(
        300.0,
        gt=0,
        description="weights.transport = 'collective': the longest a weight push may take: an "
        "engine whose load is not done by then is killed and restarted by Ray; a learner whose "
        "broadcast is not done (a hung NCCL group) is restarted from the last checkpoint, as "
        "after a rank's death",
    )
    parity_probe: int = Field(
        4,
        ge=0,
        description="sequences the learner and every engine score after each push "
        "(weights/parity_probe_diff: does every engine serve the learner's weights?); 0: "
        "off. The probe is the first completions of the run's first batch, fixed for the "
        "run, scored at the version just pushed",
    )


class RayConfig(Section):
    address: str = Field(
        "",
        description="'': RAY_ADDRESS, else the cluster of the last `ray start`, else a local "
        "one (never another run's in-process cluster)",
    )
    placement: Literal["none", "pack", "spread", "strict_pack", "strict_spread"] = Field(
        "none",
        description="placement group for the learner and the initial rollout actors: 'pack' "
        "keeps them on as few nodes as possible, 'spread' on as many; one bundle per learner "
        "rank and per initial rollout actor",
    )
    num_cpus: int = Field(
        0,
        ge=0,
        description="local cluster only; 0: the machine's CPUs, or what the run's actors ask "
        "for when that is more (they then share the cores)",
    )
    gpu_memory_gib: float = Field(
        0.0,
        ge=0,
        description="memory of one GPU of the cluster as torch reports it (less than the "
        "card's name and nvidia-smi say: "
        "[scaling.md](scaling.md#arithmetic-what-fits-where)): the memory plan printed before "
        "a GPU run starts refuses a colocated config that cannot fit it, warns when a learner "
        "or an engine alone exceeds it, and fits a learner without learner.memory_gib to it as "
        "the learner does to its own card; 0: unknown, the plan is printed but not enforced",
    )
    start_timeout_s: float = Field(
        900.0,
        gt=0,
        description="the longest the driver waits for an actor (or the run's placement group) "
        "to start: one Ray cannot place, or whose engine is still loading by then, fails the "
        "run with its name and what it asked for instead of hanging it; also how long a rollout "
        "actor Ray restarts after a crash has to come back. Generous, since a 7B vLLM engine on "
        "a cold node takes minutes",
    )
    group_interface: str = Field(
        "",
        description="network interface (e.g. 'eth0', the same name on every node) where the "
        "project's own process groups meet and talk: the learner ranks' and the collective "
        "transport's store listens on its address, and gloo and NCCL use it "
        "(GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME); '': loopback while the Ray cluster has one "
        "node, else the store on the node's address as Ray knows it and each member on the "
        "interface its routes reach the store through. Every member first checks it reaches "
        "the store within 10 s, else the run stops with one line naming its host, the interface "
        "and the address. Their traffic is unauthenticated plaintext: name a private interface",
    )

    @field_validator("group_interface")
    @classmethod
    def _check_interface(cls, name: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_.-]{0,15}", name):
            raise ValueError(
                f"{name!r} is not a network interface name (Linux names have at most 15 "
                "letters, digits, '_', '.' or '-'); see `ip -brief address`"
            )
        return name
