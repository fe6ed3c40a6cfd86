"""What the attack tests (``test_attacks.py``) look at from the host, outside the sandbox: a
worker's processes as the kernel shows them, SysV IPC objects and POSIX message queues.

A program's own report cannot be trusted to say what it changed, so each attack is also
judged from here, by the test process, which runs as the pool's user (root, or the ordinary
user of ``test_the_pool_suite_passes_as_an_ordinary_user``): everything here works as both.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
from pathlib import Path

from sandbox.trusted.pool import SandboxPool

IPC_CREAT, IPC_EXCL, IPC_RMID = 0o1000, 0o2000, 0
_IOPRIO_GET = {"x86_64": 252, "aarch64": 31}  # ioprio_get's system-call number
IOPRIO_WHO_PROCESS = 1

# The same SysV shared-memory signatures, as program text, for the attack programs that make
# segments (test_attacks.py, test_attacks_on_limits.py).
SHM_CTYPES = """
import ctypes

libc = ctypes.CDLL(None, use_errno=True)
libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]
libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
libc.shmat.restype = ctypes.c_void_p
libc.shmdt.argtypes = [ctypes.c_void_p]
libc.shmctl.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
"""

libc = ctypes.CDLL(None, use_errno=True)
libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]
libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
libc.shmat.restype = ctypes.c_void_p
libc.shmdt.argtypes = [ctypes.c_void_p]
libc.shmctl.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
libc.msgget.argtypes = [ctypes.c_int, ctypes.c_int]
libc.msgctl.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
libc.mq_open.argtypes = [ctypes.c_char_p, ctypes.c_int]
libc.mq_unlink.argtypes = [ctypes.c_char_p]


def server_pid(pool: SandboxPool, index: int = 0) -> int:
    """The host PID of worker ``index``'s server (the pool has no public accessor for it)."""
    return pool._workers[index].proc.pid


def server_children(pool: SandboxPool, index: int = 0) -> list[int]:
    """The host PIDs of worker ``index``'s server's children: its zygote alone, once it serves."""
    tasks = Path(f"/proc/{server_pid(pool, index)}/task").glob("*/children")
    return [int(pid) for path in tasks for pid in path.read_text().split()]


def zygote_pid(pool: SandboxPool, index: int = 0) -> int:
    """The host PID of worker ``index``'s zygote: the server's only child once it serves."""
    children = server_children(pool, index)
    assert len(children) == 1, f"worker {index}'s server has children {children}"
    return children[0]


def process_state(pid: int) -> dict[str, object]:
    """What a program must not be able to change in another process: its rlimits, niceness,
    scheduling policy, I/O priority and CPU affinity, and whether it is stopped."""
    limits = Path(f"/proc/{pid}/limits").read_text().splitlines()[1:]
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()  # fields 3.. of proc(5)
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    cpus = next(
        line.split(":", 1)[1].strip() for line in status if line.startswith("Cpus_allowed_list")
    )
    state: dict[str, object] = {
        f"limit {name}": values for name, values in (_limit(line) for line in limits)
    }
    state |= {
        "stopped or dead": fields[0] if fields[0] in "TtZXx" else "",
        "nice": int(fields[16]),
        "policy": int(fields[38]),
        "cpus": cpus,
    }
    number = _IOPRIO_GET.get(os.uname().machine)
    if number is not None:
        state["ioprio"] = libc.syscall(number, IOPRIO_WHO_PROCESS, pid)
    return state


def _limit(line: str) -> tuple[str, str]:
    """One row of ``/proc/PID/limits``: its name and "soft/hard"."""
    name, soft, hard, *_ = re.split(r"\s{2,}", line.strip())
    return name, f"{soft}/{hard}"


def sysv_objects(kind: str) -> list[dict[str, int]]:
    """The host's SysV objects of ``kind`` ("shm", "msg" or "sem"): each row of
    ``/proc/sysvipc/<kind>`` (as this process's IPC namespace shows them) by column name."""
    lines = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()
    header = lines[0].split()
    return [
        {
            name: int(value)
            for name, value in zip(header, line.split())
            if value.lstrip("-").isdigit()
        }
        for line in lines[1:]
    ]


def sysv_with_key(kind: str, key: int) -> list[dict[str, int]]:
    return [row for row in sysv_objects(kind) if row.get("key") == key]


def remove_sysv(kind: str, key: int) -> int:
    """Remove every host SysV object of ``kind`` with ``key`` (what a program left behind);
    returns how many there were."""
    rows = sysv_with_key(kind, key)
    ident = "shmid" if kind == "shm" else "msqid"
    control = libc.shmctl if kind == "shm" else libc.msgctl
    for row in rows:
        control(row[ident], IPC_RMID, None)
    return len(rows)


def make_segment(key: int, data: bytes) -> int:
    """A host SysV shared memory segment of this user, mode 0600, holding ``data``; its id."""
    shmid = libc.shmget(key, 4096, IPC_CREAT | IPC_EXCL | 0o600)
    if shmid < 0:
        raise OSError(ctypes.get_errno(), "shmget")
    address = libc.shmat(shmid, None, 0)
    if address in (None, ctypes.c_void_p(-1).value):
        libc.shmctl(shmid, IPC_RMID, None)
        raise OSError(ctypes.get_errno(), "shmat")
    ctypes.memmove(address, data, len(data))
    libc.shmdt(address)
    return shmid


def segment_bytes(shmid: int, size: int) -> bytes:
    """The first ``size`` bytes of segment ``shmid`` (attached read-only for the copy)."""
    address = libc.shmat(shmid, None, 0o10000)  # SHM_RDONLY
    if address in (None, ctypes.c_void_p(-1).value):
        raise OSError(ctypes.get_errno(), "shmat")
    try:
        return ctypes.string_at(address, size)
    finally:
        libc.shmdt(address)


def make_queue(key: int) -> int:
    """A host SysV message queue of this user, mode 0600, empty; its id."""
    msqid = libc.msgget(key, IPC_CREAT | IPC_EXCL | 0o600)
    if msqid < 0:
        raise OSError(ctypes.get_errno(), "msgget")
    return msqid


def queue_messages(msqid: int) -> int:
    """How many messages host queue ``msqid`` holds."""
    rows = [row for row in sysv_objects("msg") if row.get("msqid") == msqid]
    return rows[0]["qnum"] if rows else -1


def remove_id(kind: str, ident: int) -> None:
    with contextlib.suppress(Exception):
        (libc.shmctl if kind == "shm" else libc.msgctl)(ident, IPC_RMID, None)


def remove_posix_queue(name: str) -> bool:
    """Whether the host's IPC namespace held POSIX message queue ``name`` ("/..."), which a
    program left behind; removes it."""
    mqd = libc.mq_open(name.encode(), os.O_RDONLY)
    if mqd < 0:
        return False
    libc.mq_close(mqd)
    libc.mq_unlink(name.encode())
    return True
