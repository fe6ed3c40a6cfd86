"""Permission to run Intel AMX tile instructions, asked for by every process that runs a vLLM
CPU engine's model.

Linux (5.16 and later) lets a process execute AMX tile instructions only after it requested
the tile-data state with ``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``; the first
tile instruction of a process that did not is killed with SIGILL. The permission holds for
every thread of the process, already running or not; ``fork`` inherits it, ``exec`` (hence
``spawn``, hence every Ray worker) starts without it.

vLLM 0.32's CPU attention chooses its AMX kernel from CPUID alone
(``_get_attn_isa`` in ``vllm/v1/attention/backends/cpu_attn.py``) and never asks. An engine
process got the permission only as a side effect: oneDNN asks on its first AMX query, and with
the tiny weights of the test model vLLM's small-GEMM kernel (``weight_packed_linear``,
``csrc/cpu/sgl-kernels/gemm.cpp``) calls oneDNN's brgemm only for more than 4 tokens in a
forward pass. An engine whose first forward pass holds 4 tokens or fewer (a restarted engine
retrying a share of two 2-token prompts) ran its attention without the permission and died.
Asking once when the engine's worker starts removes that dependence on the first batch.
"""

from __future__ import annotations

import ctypes
import logging
import os
import platform
import sys

logger = logging.getLogger(__name__)

# <asm/prctl.h> and the x86-64 syscall table; the numbers mean something else elsewhere.
_SYS_ARCH_PRCTL = 158
_ARCH_GET_XCOMP_PERM = 0x1022
_ARCH_REQ_XCOMP_PERM = 0x1023
_XFEATURE_XTILEDATA = 18


def request_amx_tiles() -> bool:
    """Ask Linux to let this process run AMX tile instructions; whether it may now.

    Harmless where there is nothing to ask for: off x86-64 Linux nothing is called, and a
    kernel or CPU without AMX refuses the request (``EOPNOTSUPP`` or ``EINVAL``). A CPU that
    has AMX but a refused request is logged: vLLM's attention would die with SIGILL there.
    """
    if not _x86_64_linux():
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    # Variadic: pass full-width longs, as the kernel reads the registers.
    status = libc.syscall(
        ctypes.c_long(_SYS_ARCH_PRCTL),
        ctypes.c_long(_ARCH_REQ_XCOMP_PERM),
        ctypes.c_long(_XFEATURE_XTILEDATA),
    )
    error = ctypes.get_errno() if status != 0 else 0
    permitted = amx_tiles_permitted()
    if not permitted and cpu_has_amx_tiles():
        logger.warning(
            "this CPU has AMX but Linux refused AMX tiles to this process (%s): vLLM's CPU "
            "attention will die with SIGILL",
            os.strerror(error) if error else "no error, yet not permitted",
        )
    return permitted


def amx_tiles_permitted() -> bool:
    """Whether this process holds the AMX tile-data permission now."""
    if not _x86_64_linux():
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    mask = ctypes.c_ulong(0)
    status = libc.syscall(
        ctypes.c_long(_SYS_ARCH_PRCTL), ctypes.c_long(_ARCH_GET_XCOMP_PERM), ctypes.byref(mask)
    )
    return status == 0 and bool(mask.value & (1 << _XFEATURE_XTILEDATA))


def cpu_has_amx_tiles() -> bool:
    """Whether the CPU advertises AMX tiles (``amx_tile`` in ``/proc/cpuinfo``), which is what
    vLLM's attention goes by."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    return "amx_tile" in line.split()
    except OSError:
        pass
    return False


def _x86_64_linux() -> bool:
    return sys.platform.startswith("linux") and platform.machine() == "x86_64"
