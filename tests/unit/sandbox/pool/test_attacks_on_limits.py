"""Issue 48's attack suite, classes 5 and 6 (1 to 4 are in ``test_attacks.py``): memory beyond
``sandbox.memory_mb`` (+10%) by forking, memfds, tmpfs and SysV memory, and a record flood's
cost to the front and the worker's server. Each attack got through on 7a049f7; each runs on a
fresh one-worker pool, as root and as the ordinary user of
``test_the_pool_suite_passes_as_an_ordinary_user``.
"""

from __future__ import annotations

import os
import secrets
import tracemalloc
from pathlib import Path

from common.types import ExecutionResult, Verdict
from tests.unit.sandbox.helpers import GOOD_F, attack_pool, run
from tests.unit.sandbox.pool import host_probes

WRONG_F = "def f(x):\n    return x\n"
NOT_A_PROGRAMS_DOING = (Verdict.INFRA_ERROR, Verdict.PASSED)


# 5. Memory: what one execution holds, by whatever path, stays under memory_mb + 10%.
MEMORY_MB = 256
MEMORY_BOUND_MB = int(MEMORY_MB * 1.1)
FORKED_MEMORY = """
import os, signal

MIB = 1 << 20
signal.signal(signal.SIGPIPE, signal.SIG_IGN)

def _child(block_mib, report, command):
    try:
        block = b"\\x01" * (block_mib * MIB)
    except MemoryError:
        os._exit(0)
    os.write(report, b"y")
    while os.read(command, 1) == b"?":  # one question per round; end of file: let go
        os.write(report, b"y" if block[-1] == 1 else b"n")
    os._exit(0)

def held(children, block_mib):
    '''How many children hold block_mib MiB each at once: forked one by one, each reports
    once it has its block, and after the last one each is asked again; a child that was
    killed since answers with end of file (its pipes close as it dies).'''
    kids, pids = [], []
    for _ in range(children):
        report_r, report_w = os.pipe()
        command_r, command_w = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            for fd in [report_r, command_w] + [fd for kid in kids for fd in kid]:
                os.close(fd)
            _child(block_mib, report_w, command_r)
        pids.append(pid)
        os.close(report_w)
        os.close(command_r)
        kids.append((report_r, command_w))
        os.read(report_r, 1)
    holding = 0
    for report_r, command_w in kids:
        try:
            os.write(command_w, b"?")
            holding += os.read(report_r, 1) == b"y"
        except OSError:
            pass
    for report_r, command_w in kids:
        os.close(command_w)
        os.close(report_r)
    for pid in pids:
        os.waitpid(pid, 0)
    return holding
"""
MEMFD_MEMORY = """
import os

MIB = 1 << 20

def held(total_mib, file_mib):
    '''MiB written into memfds kept open (file_mib each: under RLIMIT_FSIZE).'''
    chunk, fds, held = b"\\x01" * MIB, [], 0
    try:
        while held < total_mib:
            fds.append(os.memfd_create("attack"))
            for _ in range(file_mib):
                held += os.write(fds[-1], chunk) // MIB
    except OSError:
        pass
    return held
"""
EVERY_PATH_MEMORY = (
    host_probes.SHM_CTYPES
    + """
import os

MIB = 1 << 20
CHUNK = b"\\x01" * MIB

def _files(directory, cap_mib, file_mib=15):
    '''MiB written into files in directory (file_mib each: under RLIMIT_FSIZE).'''
    written = 0
    try:
        for index in range(cap_mib // file_mib):
            fd = os.open(os.path.join(directory, f"fill{index}"), os.O_CREAT | os.O_WRONLY)
            for _ in range(file_mib):
                written += os.write(fd, CHUNK)
            os.close(fd)
    except OSError:
        pass
    return written / MIB

def _segments(count, segment_mib=32):
    '''SysV segments written, then detached: the memory stays, the address space not.'''
    ids = []
    for index in range(count):
        shmid = libc.shmget(KEY + index, segment_mib * MIB, 0o3600)  # IPC_CREAT | IPC_EXCL
        if shmid < 0:
            break
        ids.append(shmid)
        address = libc.shmat(shmid, None, 0)
        if address in (None, ctypes.c_void_p(-1).value):
            break
        ctypes.memset(address, 1, segment_mib * MIB)
        libc.shmdt(address)
    return ids

def _heap(cap_mib, block_mib=8):
    blocks = []
    try:
        while len(blocks) * block_mib < cap_mib:
            blocks.append(b"\\x01" * (block_mib * MIB))
    except MemoryError:
        pass
    return blocks

def held():
    '''MiB held at once in SysV segments, /dev/shm, the scratch directory and the heap.'''
    shm_ids = _segments(4)
    held = [32 * len(shm_ids), _files("/dev/shm", 128), _files(".", 128)]
    held.append(8 * len(_heap(400)))
    for shmid in shm_ids:
        libc.shmctl(shmid, 0, None)  # IPC_RMID: nothing left for the host to clean
    return held
"""
)


def _memory_contained(result: ExecutionResult) -> str:
    """Empty if the program stayed within the bound (passed) or was stopped on the way (a
    MemoryError, or killed by a signal: an OOM kill reads as ``timeout``); else what it did.
    A program that failed otherwise (its own bug, a value that cannot be judged) proves
    nothing either way, and fails the test too."""
    killed = result.verdict is Verdict.RUNTIME_ERROR and "(signal " in result.detail
    if result.verdict in (Verdict.PASSED, Verdict.MEMORY_LIMIT, Verdict.TIMEOUT) or killed:
        return ""
    return f"{result.verdict.value}: {result.detail}"


def test_forked_children_cannot_hold_more_than_memory_mb() -> None:
    """8 children of ~100 MiB each with memory_mb = 256: at most 2 hold theirs at once (on
    7a049f7 all 8 did: memory_mb was a per-process address-space limit, 64 processes, no
    cgroup)."""
    bound = MEMORY_BOUND_MB // 100
    with attack_pool(memory_mb=MEMORY_MB, timeout_s=15.0, test_timeout_s=12.0) as pool:
        result = run(pool, FORKED_MEMORY, tests=(f"assert held(8, 100) <= {bound}",))
    assert not _memory_contained(result), _memory_contained(result)


def test_memfds_cannot_hold_more_than_memory_mb() -> None:
    """400 MiB written into memfds (15 MiB each, under RLIMIT_FSIZE, descriptors kept open)
    with memory_mb = 256: at most 281 MiB held, or refused or killed on the way (on 7a049f7
    memfds counted against nothing: all 405 MiB were held, without forking)."""
    with attack_pool(memory_mb=MEMORY_MB, timeout_s=15.0, test_timeout_s=12.0) as pool:
        result = run(pool, MEMFD_MEMORY, tests=(f"assert held(400, 15) <= {MEMORY_BOUND_MB}",))
    assert not _memory_contained(result), _memory_contained(result)


def test_files_shm_and_heap_together_stay_under_memory_mb() -> None:
    """SysV segments (detached, so outside the address space), /dev/shm, the scratch tmpfs
    and the heap, held at once (the program returns the MiB of each, in that order), stay
    under memory_mb + 10% (on 7a049f7 the heap alone could take memory_mb, and the scratch
    directory and SysV segments came on top: 128 + 0 + 64 + 248 MiB)."""
    key = 0x45000000 | secrets.randbits(20) << 3
    tests = (f"assert sum(held()) <= {MEMORY_BOUND_MB}",)
    try:
        with attack_pool(memory_mb=MEMORY_MB, timeout_s=15.0, test_timeout_s=12.0) as pool:
            result = run(pool, f"KEY = {key}\n" + EVERY_PATH_MEMORY, tests=tests)
    finally:
        for index in range(4):  # should the program have been killed before removing them
            host_probes.remove_sysv("shm", key + index)
    assert not _memory_contained(result), _memory_contained(result)


# 6. The trusted side. The front's scan of program text is shown linear, on these sources and
# six more, in tests/unit/sandbox/test_trusted_bounds.py (it needs no pool); here, a flood of
# records through the real pool.
# 7 records just under the 2 MiB frame cap (14.7 MB, under the 16 MiB per execution), each a
# list of ~700k empty dicts: 3 bytes of JSON, ~70 bytes each once decoded.
RECORD_FLOOD = (
    """
import os, struct

def _flood():
    body = b'{"t":"test","i":0,"values":[[' + b"{}," * 699_000 + b'{}]]}'
    frame = struct.pack(">I", len(body)) + body
    for _ in range(7):
        view = memoryview(frame)
        while view:
            view = view[os.write(3, view):]

_flood()
"""
    + WRONG_F
)
FLOOD_BOUND_MIB = 64


def _peak_rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    return next(int(line.split()[1]) for line in status if line.startswith("VmHWM")) / 1024


def test_record_flood_does_not_bloat_the_trusted_side() -> None:
    """14 MiB of records holding ~5M empty dicts, within the frame and value caps: the front's
    Python allocations and the worker server's peak RSS each grow by at most 64 MiB, and the
    verdict is the program's own (on 7a049f7 the front grew by 355 MiB and the server by 358
    MiB here: records were decoded whole, and neither trusted process has a memory limit)."""
    with attack_pool(timeout_s=30.0, test_timeout_s=25.0) as pool:
        assert run(pool, GOOD_F).passed
        server = host_probes.server_pid(pool)
        server_before = _peak_rss_mib(server)
        tracemalloc.start()
        try:
            baseline = tracemalloc.get_traced_memory()[0]
            result = run(pool, RECORD_FLOOD)
            front_mib = (tracemalloc.get_traced_memory()[1] - baseline) / (1 << 20)
        finally:
            tracemalloc.stop()
        server_mib = (
            _peak_rss_mib(server) - server_before if os.path.exists(f"/proc/{server}") else 0.0
        )
    growth = f"front +{front_mib:.0f} MiB, server +{server_mib:.0f} MiB"
    assert result.verdict not in NOT_A_PROGRAMS_DOING, f"{result.verdict.value}: {result.detail}"
    assert front_mib <= FLOOD_BOUND_MIB and server_mib <= FLOOD_BOUND_MIB, growth
