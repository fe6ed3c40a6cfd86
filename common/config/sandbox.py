"""The ``[sandbox]`` section: the pool that runs completions' programs, its limits and isolation."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from common.config.base import Section

ISOLATION_LEVELS = ("full", "namespaces", "rlimits")  # sandbox.min_isolation, strongest first
MIN_ISOLATION_HELP = "the weakest sandbox isolation accepted (sandbox.min_isolation)"


class SandboxConfig(Section):
    num_workers: int = Field(2, ge=1)
    timeout_s: float = Field(10.0, gt=0, description="wall-clock limit for one completion")
    test_timeout_s: float = Field(5.0, gt=0, description="wall-clock limit for one test")
    memory_mb: int = Field(512, ge=32)
    max_output_bytes: int = Field(64 * 1024, ge=1024)
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
    cache: bool = True
    min_isolation: Literal[ISOLATION_LEVELS] = Field(
        "full",
        description="the weakest isolation the pool accepts (docs/sandbox.md): 'full' (locked "
        "read-only view, no capabilities, seccomp); 'namespaces' also accepts workers whose "
        "view could not be locked (unsafe: programs could undo it); 'rlimits' also accepts "
        "no namespaces at all (unsafe: programs run as a host user)",
    )
    num_cpus: float = Field(0.0, ge=0)
    pin_hot_pages: bool = Field(
        True,
        description="each worker's zygote pins the pages an execution writes (io_uring "
        "buffers, ~1 MiB of RLIMIT_MEMLOCK per worker), so that a fork copies them at once "
        "instead of faulting on each; falls back, and says why, where the kernel refuses",
    )
    zygote_loop: Literal["auto", "python"] = Field(
        "auto",
        description="'auto': each zygote runs its loop in C (sandbox/isolated/_zygote.c, built on "
        "first use with the host's C compiler and cached) when it is its PID namespace's "
        "init; 'python': the Python loop, which does the same with more CPU per execution",
    )
    cpu_affinity: Literal["auto", "none"] | list[int] = Field(
        "auto",
        description="'auto': worker i (its zygote and every child) is pinned to the i-th CPU "
        "this process may use counting from the last, round robin; a list of CPU ids: the "
        "same over those CPUs in that order; 'none': the scheduler places them",
    )

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: object) -> object:
        if isinstance(data, dict) and "allow_unisolated" in data:
            raise ValueError(
                "allow_unisolated is now min_isolation: min_isolation = 'rlimits' accepts what "
                "allow_unisolated = true did (docs/sandbox.md, isolation levels)"
            )
        return data

    @model_validator(mode="after")
    def _check_cpu_affinity(self) -> SandboxConfig:
        if isinstance(self.cpu_affinity, list) and (
            not self.cpu_affinity or min(self.cpu_affinity) < 0
        ):
            raise ValueError("cpu_affinity must be 'auto', 'none' or a non-empty list of CPU ids")
        return self
