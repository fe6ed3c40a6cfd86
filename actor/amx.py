"""Permission to run Intel AMX tile instructions, asked for by every process that runs a vLLM
CPU engine's model.

Linux lets a process execute AMX tile instructions only after it requested the tile-data state
(``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``); the first tile instruction of a
process that did not is killed with SIGILL, and ``exec`` (so every Ray worker) starts without it.
vLLM's CPU attention chooses its AMX kernel from CPUID alone and never asks: an engine got the
permission only as a side effect of oneDNN's first AMX query, which small forward passes do not
make. Asking once at start removes that.
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
    """Ask Linux to let this process run AMX tile instructions; whether it may now. Harmless
    where there is nothing to ask for (off x86-64 Linux nothing is called; without AMX the
    kernel refuses). A CPU that has AMX but a refused request is logged: vLLM would die."""
    if not _x86_64_linux():
        return False
    status = _arch_prctl(_ARCH_REQ_XCOMP_PERM, ctypes.c_long(_XFEATURE_XTILEDATA))
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
    mask = ctypes.c_ulong(0)
    status = _arch_prctl(_ARCH_GET_XCOMP_PERM, ctypes.byref(mask))
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


def _arch_prctl(option: int, argument: object) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    # Variadic: pass full-width longs, as the kernel reads the registers.
    return libc.syscall(ctypes.c_long(_SYS_ARCH_PRCTL), ctypes.c_long(option), argument)


def _x86_64_linux() -> bool:
    return sys.platform.startswith("linux") and platform.machine() == "x86_64"
