"""The attack suite of issue 48: programs that try to fool, knock out or outgrow the judge, run
through the real pool, one test (or a small group) per attack class:

1. changing the zygote the program shares a uid with (rlimits, priority, affinity, signals);
2. turning its own 0 into a masked ``infra_error``;
3. reading answers: host files, later-created paths, ``/sys``, ``/dev``, the host's ``/etc``;
4. kernel objects shared with the host (SysV IPC, POSIX queues, socket families);
5. memory beyond ``sandbox.memory_mb`` (+10%) by forking, memfds, tmpfs and SysV memory, and
6. the trusted side's memory under a record flood: both in ``test_attacks_on_limits.py``
   (the scan of program text, which needs no pool, is shown linear in
   ``tests/unit/sandbox/test_trusted_bounds.py``).

Each attack program reports what it observed through its test values (an errno's name per
call, what it could list or read, how much memory it held), and the test also looks from the
host where a program's word is not enough (``host_probes.py``). Attacks that damage the
pool get a fresh one-worker pool, so the next program lands on the worker that was attacked.
Everything here runs as root and as the ordinary user of
``test_the_pool_suite_passes_as_an_ordinary_user``; the attacks that need root to be staged
(files created at ``/``) are in ``tests/unit/sandbox/test_attacks_as_root.py``.
"""

from __future__ import annotations

import glob
import json
import os
import pwd
import secrets
import socket
import sys
import tempfile

import pytest

from common.types import ExecutionJob, ExecutionResult, Verdict
from sandbox.trusted.pool import SandboxPool
from tests.conftest import REPO_ROOT
from tests.unit.sandbox.helpers import F_TESTS, GOOD_F, attack_pool, run
from tests.unit.sandbox.pool import host_probes

LOOPS = ["auto", "python"]  # the zygote's loop in C (where it builds) and in Python
WRONG_F = "def f(x):\n    return x\n"
MBPP = REPO_ROOT.parent / "shared" / "data" / "mbpp.jsonl"
NOT_A_PROGRAMS_DOING = (Verdict.INFRA_ERROR, Verdict.PASSED)


def _correct_jobs(references: int = 4) -> list[ExecutionJob]:
    """Correct programs: ``GOOD_F`` and the first MBPP reference solutions."""
    rows = [json.loads(line) for line in MBPP.read_text().splitlines()[:references]]
    jobs = [ExecutionJob(GOOD_F, F_TESTS)]
    jobs += [ExecutionJob(r["code"], tuple(r["test_list"]), r["test_setup_code"]) for r in rows]
    return jobs


def _correct_programs_fail(pool: SandboxPool) -> list[str]:
    """The verdicts of correct programs that did not pass (none, in a pool left intact)."""
    results = pool.run(_correct_jobs())
    return [f"{r.verdict.value} ({r.detail})" for r in results if not r.passed]


def _outcome_tests(names: list[str], refused: bool = True) -> tuple[str, ...]:
    """One test per reported call: that it was refused (its outcome is not "ok")."""
    return tuple(f"assert outcome({name!r}) {'!=' if refused else '=='} 'ok'" for name in names)


def _went_through(result: ExecutionResult, names: list[str]) -> str:
    """Which of a program's one-per-check tests failed (the attacks that went through), for
    an assertion message; all of them where the program did not report (its verdict says)."""
    failed = [n for n, v in zip(names, result.test_verdicts) if v is not Verdict.PASSED]
    return f"{result.verdict.value}, went through: {failed or names}; {result.detail}"


# Reports what each call returned: an errno's name, "ok" (it went through) or "self" (where
# each execution is its own PID namespace's init, PID 1 is the program itself: harmless).
OUTCOME = """
import errno, os

SELF = os.getpid() == 1

def _outcome(call):
    try:
        call()
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))
    return "ok"

def outcome(name):
    return OUTCOMES[name]
"""

# 1. The zygote: PID 1 of the worker's namespace, the same uid as the program.
ZYGOTE_CALLS = [
    "prlimit_fsize",
    "prlimit_nproc",
    "setpriority",
    "sched_setscheduler",
    "ioprio_set",
    "sched_setaffinity",
    "pidfd_open",
]
ZYGOTE_ATTACK = (
    OUTCOME
    + """
import ctypes, resource

def _ioprio_set():
    number = {"x86_64": 251, "aarch64": 30}[os.uname().machine]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(number, 1, 1, 3 << 13) < 0:  # IOPRIO_WHO_PROCESS, 1, class idle
        raise OSError(ctypes.get_errno(), "ioprio_set")

def _pidfd_open():
    os.close(os.pidfd_open(1))

CALLS = {
    "prlimit_fsize": lambda: resource.prlimit(1, resource.RLIMIT_FSIZE, (0, 0)),
    "prlimit_nproc": lambda: resource.prlimit(1, resource.RLIMIT_NPROC, (0, 0)),
    "setpriority": lambda: os.setpriority(os.PRIO_PROCESS, 1, 19),
    "sched_setscheduler": lambda: os.sched_setscheduler(1, os.SCHED_IDLE, os.sched_param(0)),
    "ioprio_set": _ioprio_set,
    "sched_setaffinity": lambda: os.sched_setaffinity(1, range(os.cpu_count() or 1)),
    "pidfd_open": _pidfd_open,
}
OUTCOMES = {name: "self" if SELF else _outcome(call) for name, call in CALLS.items()}
# Not aimed at a PID: it renices every process of the caller's uid it can see, the zygote too
# where it shares that uid; the host's view of the zygote decides.
OUTCOMES["setpriority_user"] = _outcome(lambda: os.setpriority(os.PRIO_USER, 0, 19))
"""
)

ZYGOTE_SIGNALS = ["SIGUSR1", "SIGSTOP", "SIGTERM", "SIGINT"]  # SIGINT last: it can be lethal
SIGNAL_ATTACK = (
    OUTCOME
    + f"NAMES = {ZYGOTE_SIGNALS!r}\n"
    + """
import signal

for own in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1):  # where PID 1 is the program
    signal.signal(own, signal.SIG_IGN)
OUTCOMES = {}
for name in NAMES:
    number = getattr(signal, name)
    OUTCOMES[name] = "self" if SELF else _outcome(lambda: os.kill(1, number))
    if name == "SIGSTOP" and OUTCOMES[name] == "ok":
        os.kill(1, signal.SIGCONT)  # a stopped zygote would hang the next program ~15 s
"""
)


def _zygote_damage(pool: SandboxPool, zygote: int, before: dict[str, object]) -> list[str]:
    """What changed in the zygote as the host sees it (its rlimits, niceness, scheduling,
    affinity, run state), or that it is gone."""
    alive = host_probes.server_children(pool)
    if alive != [zygote]:
        return [f"the zygote {zygote} is gone (the worker's processes now: {alive})"]
    after = host_probes.process_state(zygote)
    changed = {
        key: (before[key], after.get(key)) for key in before if before[key] != after.get(key)
    }
    return [f"the zygote changed (before, after): {changed}"] if changed else []


@pytest.mark.parametrize("loop", LOOPS, ids=["c_loop", "python_loop"])
def test_zygote_limits_priority_and_affinity_cannot_be_changed(loop: str) -> None:
    """prlimit64, setpriority, sched_setscheduler, ioprio_set, sched_setaffinity and pidfd_open
    on PID 1 are refused; the zygote is as it was; correct programs still pass there (on
    7a049f7 a file-size limit of 0 made each later child die in its own setrlimit, and a
    process limit of 0 made each later fork fail: infra_error, for the pool's life)."""
    _assert_zygote_holds(loop, ZYGOTE_ATTACK, ZYGOTE_CALLS)


@pytest.mark.parametrize("loop", LOOPS, ids=["c_loop", "python_loop"])
def test_zygote_cannot_be_signalled(loop: str) -> None:
    """kill(1, SIGUSR1/SIGSTOP/SIGTERM/SIGINT) is refused (on 7a049f7 each returned 0, and
    SIGINT killed the Python loop's zygote); the attack is not masked; the zygote lives on,
    unstopped, and correct programs pass there."""
    _assert_zygote_holds(loop, SIGNAL_ATTACK, ZYGOTE_SIGNALS)


def _assert_zygote_holds(loop: str, attack: str, calls: list) -> None:
    """Run ``attack`` (one outcome test per entry of ``calls``) on a fresh one-worker pool:
    every call refused, the zygote as it was, correct programs still passing there."""
    with attack_pool(loop) as pool:
        zygote = host_probes.zygote_pid(pool)
        before = host_probes.process_state(zygote)
        result = run(pool, attack, tests=_outcome_tests(calls))
        problems = [] if result.passed else [_went_through(result, calls)]
        problems += _zygote_damage(pool, zygote, before)
        failing = _correct_programs_fail(pool)
        if failing:
            problems.append(f"correct programs afterwards: {failing}")
    assert not problems, "\n".join(problems)


# 2. Masking: whatever a wrong program does, its verdict is its own failure, never the
# infra_error the reward masks. Each is followed, on the same worker, by a program that
# finds its scratch directory empty and passes.
MASKING = {
    "nested_directories": (
        "import os\nfor _ in range(1100):\n    os.mkdir('d')\n    os.chdir('d')\n" + WRONG_F
    ),
    "nested_long_names": (
        "import os\nfor _ in range(40):\n    os.mkdir('n' * 250)\n    os.chdir('n' * 250)\n"
        + WRONG_F
    ),
    "locked_directories": (
        "import os\nos.makedirs('a/b/c')\nopen('a/b/c/x', 'w').close()\n"
        "os.chmod('a/b/c', 0)\nos.chmod('a/b', 0)\nos.chmod('a', 0o500)\n" + WRONG_F
    ),
    "every_inode": (
        "import os\nfor i in range(5000):\n    try:\n        os.mkfifo(f'p{i}')\n"
        "    except OSError:\n        break\n" + WRONG_F
    ),
    "kill_own_group": "import os, signal\nos.kill(0, signal.SIGKILL)\n",
    "killpg": "import os, signal\nos.killpg(os.getpgrp(), signal.SIGKILL)\n",
    "kill_everything": "import os, signal\nos.kill(-1, signal.SIGKILL)\n" + WRONG_F,
    "exit_at_load": "import os\nos._exit(0)\n",
    "exit_in_a_test": "import os\ndef f(x):\n    os._exit(3)\n",
    "abort": "import os\nos.abort()\n",
    "close_value_pipe": "import os\nos.close(3)\n" + WRONG_F,
    "segfault_self": "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n",
    "orphan_left_behind": (
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        "        time.sleep(60)\n    os._exit(0)\n" + WRONG_F
    ),
}
EMPTY_SCRATCH = "import os\nassert os.listdir('.') == [], os.listdir('.')[:5]\n" + GOOD_F


@pytest.mark.parametrize("loop", LOOPS, ids=["c_loop", "python_loop"])
def test_no_wrong_program_is_masked(loop: str) -> None:
    """Each wrong program gets a verdict of its own (``failed``, ``runtime_error``...), never
    ``infra_error`` (on 7a049f7 1,100 nested directories made the server's rmtree raise
    RecursionError: the server died twice and the verdict was infra_error); the next program
    on that worker finds an empty scratch directory and passes."""
    problems = []
    with attack_pool(loop) as pool:
        for name, code in MASKING.items():
            attack, probe = pool.run(
                [ExecutionJob(code, F_TESTS), ExecutionJob(EMPTY_SCRATCH, F_TESTS)]
            )
            if attack.verdict in NOT_A_PROGRAMS_DOING:
                problems.append(f"{name}: {attack.verdict.value} ({attack.detail})")
            if not probe.passed:
                problems.append(f"after {name}: {probe.verdict.value} ({probe.detail})")
        failing = _correct_programs_fail(pool)
        if failing:
            problems.append(f"correct programs afterwards: {failing}")
    assert not problems, "\n".join(problems)


# 3. Reading answers. What a program may see: the operating system's directories, the
# interpreter's prefixes, the sandbox package, its scratch directory, /tmp; a /dev of four
# devices (and the fd/stdin/stdout/stderr links); its own /proc. Nothing else of the host.
ALLOWED_DEV = {"null", "zero", "random", "urandom", "fd", "stdin", "stdout", "stderr"}
SYSTEM_TOPS = {"bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "dev", "proc", "tmp"}
HOST_ONLY = ["/container_info.json", "/.dockerenv", "/etc/hostname", "/etc/shadow", "/etc/gshadow"]
HOST_ONLY += ["/etc/machine-id", "/sys/kernel", "/sys/fs/cgroup", "/dev/kvm", "/dev/vsock"]
READS = ["root", "dev", "sys", "host_paths", "accounts", "scratch_siblings"]
READING_ATTACK = """
import os

def _listing(path):
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []

def _accounts():
    try:
        with open("/etc/passwd") as fh:
            return {line.split(":")[0] for line in fh}
    except OSError:
        return set()

def extra(what):
    if what == "root":
        return [name for name in _listing("/") if name not in ALLOWED_ROOT]
    if what == "dev":
        return [name for name in _listing("/dev") if name not in ALLOWED_DEV]
    if what == "sys":
        return _listing("/sys")
    if what == "host_paths":
        return [path for path in HOST_PATHS if os.path.lexists(path)]
    if what == "accounts":
        return sorted(_accounts() & HOST_ACCOUNTS)
    here = os.getcwd()
    parent = os.path.dirname(here)
    if parent == "/":  # the root's listing says it all
        return []
    return [name for name in _listing(parent) if name != os.path.basename(here)]
"""


def _allowed_root() -> set[str]:
    """Top-level names a program may see: the system's and those of the paths the view binds
    back (the interpreter's prefixes, the sandbox package, the pool's scratch directory)."""
    kept = [sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(sys.executable)]
    kept += [str(REPO_ROOT / "sandbox"), tempfile.gettempdir()]
    tops = {os.path.realpath(path).strip("/").split("/")[0] for path in kept}
    tops |= {path.strip("/").split("/")[0] for path in kept}
    return SYSTEM_TOPS | tops


def _host_accounts() -> set[str]:
    """The host's own accounts (uid 1000 up, not nobody), but the pool's user itself."""
    own = pwd.getpwuid(os.getuid()).pw_name
    return {e.pw_name for e in pwd.getpwall() if 1000 <= e.pw_uid < 65534 and e.pw_name != own}


def test_host_files_and_devices_are_not_visible(pool: SandboxPool) -> None:
    """The program lists ``/``, ``/dev`` and ``/sys``, looks for host-only files (on 7a049f7
    ``/container_info.json``, ``/etc/hostname``, all of ``/dev``, ``/sys`` and the host's
    accounts in ``/etc/passwd`` were there) and for the other workers' scratch directories:
    it finds nothing beyond what the view allows."""
    host_paths = [p for p in HOST_ONLY if os.path.lexists(p)] + glob.glob("/dev/nvidia*")
    constants = (
        f"ALLOWED_ROOT = {sorted(_allowed_root())!r}\nALLOWED_DEV = {sorted(ALLOWED_DEV)!r}\n"
        f"HOST_PATHS = {host_paths!r}\nHOST_ACCOUNTS = {_host_accounts()!r}\n"
    )
    tests = tuple(f"assert extra({what!r}) == []" for what in READS)
    result = run(pool, constants + READING_ATTACK, tests=tests)
    assert result.passed, _went_through(result, READS)


# 4. Kernel objects. The program makes a 32 MiB SysV segment, a SysV queue holding a message
# and a POSIX queue, and opens sockets of families programs never need.
IPC_HEADER = (
    host_probes.SHM_CTYPES
    + """
import os, socket, struct

libc.msgget.argtypes = [ctypes.c_int, ctypes.c_int]
libc.msgsnd.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
libc.mq_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
IPC_CREAT, IPC_RMID, MIB = 0o1000, 0, 1 << 20
BAD_ADDRESS = (None, ctypes.c_void_p(-1).value)

def _id(value):
    if value < 0:
        raise OSError(ctypes.get_errno(), "refused")
    return value

def _attach(shmid):
    address = libc.shmat(shmid, None, 0)
    if address in BAD_ADDRESS:
        raise OSError(ctypes.get_errno(), "shmat")
    return address

def _send(msqid):
    message = ctypes.create_string_buffer(struct.pack("l", 1) + b"from a program")
    _id(libc.msgsnd(msqid, message, 14, 0o4000))  # IPC_NOWAIT
"""
)
FAMILIES = {  # name: (family, type, protocol), as numbers for the program's text
    "AF_VSOCK": (40, int(socket.SOCK_STREAM), 0),
    "AF_NETLINK": (16, int(socket.SOCK_RAW), 0),
    "AF_PACKET": (17, int(socket.SOCK_RAW), 0),
    "AF_ALG": (38, int(socket.SOCK_SEQPACKET), 0),
    "AF_KEY": (15, int(socket.SOCK_RAW), 2),
    "AF_XDP": (44, int(socket.SOCK_RAW), 0),
    "AF_TIPC": (30, int(socket.SOCK_RDM), 0),
    "AF_CAN": (29, int(socket.SOCK_RAW), 1),
}
OBJECTS_ATTACK = """
def _segment():
    address = _attach(_id(libc.shmget(KEY, 32 * MIB, IPC_CREAT | 0o600)))
    ctypes.memset(address, 1, 32 * MIB)
    libc.shmdt(address)

def _queue():
    _send(_id(libc.msgget(KEY + 1, IPC_CREAT | 0o600)))

def _posix_queue():
    _id(libc.mq_open(QUEUE.encode(), os.O_CREAT | os.O_RDWR, 0o600, None))

def _socket(family, kind, protocol):
    socket.socket(family, kind, protocol).close()

def _socketpair():
    for end in socket.socketpair(socket.AF_UNIX):
        end.close()

CALLS = {"shm": _segment, "msg": _queue, "mq": _posix_queue, "AF_UNIX": _socketpair}
CALLS.update({name: (lambda spec=spec: _socket(*spec)) for name, spec in FAMILIES.items()})
OUTCOMES = {name: _outcome(call) for name, call in CALLS.items()}
"""
# The next program on the worker: does it find what the attack left?
LEFTOVERS_PROBE = """
OUTCOMES = {
    "shm": _outcome(lambda: _id(libc.shmget(KEY, 0, 0))),
    "msg": _outcome(lambda: _id(libc.msgget(KEY + 1, 0))),
    "mq": _outcome(lambda: _id(libc.mq_open(QUEUE.encode(), os.O_RDONLY, 0, None))),
}
"""


def _ipc_program(body: str, **constants: object) -> str:
    assignments = "".join(f"{name} = {value!r}\n" for name, value in constants.items())
    return OUTCOME + IPC_HEADER + assignments + body


def test_kernel_objects_stay_inside_the_execution() -> None:
    """The program's SysV segment (32 MiB) and queue and its POSIX queue are never seen on the
    host, nor by the next program on its worker, and outlive nothing (on 7a049f7 all three
    stayed on the host after the pool closed: nothing caps them, the OOM killer cannot free
    them); sockets of the families programs never need are refused (AF_VSOCK is not
    namespaced: a program held a VM-wide port), AF_UNIX ones still work."""
    key = 0x47000000 | secrets.randbits(20) << 2
    queue = f"/grpo-attack-{key:x}"
    constants = {"KEY": key, "QUEUE": queue, "FAMILIES": FAMILIES}
    refused = list(FAMILIES)
    tests = _outcome_tests(refused) + _outcome_tests(["AF_UNIX"], refused=False)
    problems = []
    try:
        with attack_pool() as pool:
            result = run(pool, _ipc_program(OBJECTS_ATTACK, **constants), tests=tests)
            if not result.passed:
                problems.append(_went_through(result, [*refused, "AF_UNIX"]))
            on_host = _ipc_on_host(key, queue)
            if on_host:
                problems.append(f"while the pool runs, the host holds the program's {on_host}")
            names = ["shm", "msg", "mq"]
            probe = run(pool, _ipc_program(LEFTOVERS_PROBE, **constants), _outcome_tests(names))
            if not probe.passed:
                problems.append(f"the next program found {_went_through(probe, names)}")
        left = _ipc_on_host(key, queue)
        if left:
            problems.append(f"after the pool closed, the host still holds the program's {left}")
    finally:
        host_probes.remove_sysv("shm", key)
        host_probes.remove_sysv("msg", key + 1)
        host_probes.remove_posix_queue(queue)
    assert not problems, "\n".join(problems)


def _ipc_on_host(key: int, queue: str) -> list[str]:
    """Which of the attack's objects the host's IPC namespace holds (a POSIX queue found is
    removed: it is only ever looked for once)."""
    found = {
        "SysV segment": bool(host_probes.sysv_with_key("shm", key)),
        "SysV queue": bool(host_probes.sysv_with_key("msg", key + 1)),
        "POSIX queue": host_probes.remove_posix_queue(queue),
    }
    return [name for name, there in found.items() if there]


HOST_IPC_ATTACK = """
def _listed():
    keys = set()
    for kind in ("shm", "msg"):
        try:
            with open(f"/proc/sysvipc/{kind}") as fh:
                keys |= {int(line.split()[0]) for line in list(fh)[1:]}
        except (OSError, ValueError, IndexError):
            pass
    return [key for key in (HOST_KEY, HOST_KEY + 1) if key in keys]

def _write_segment():
    address = _attach(HOST_SHMID)
    ctypes.memmove(address, b"written by a program", 20)
    libc.shmdt(address)

OUTCOMES = {
    "shmget": _outcome(lambda: _id(libc.shmget(HOST_KEY, 0, 0))),
    "shmat": _outcome(_write_segment),
    "msgget": _outcome(lambda: _id(libc.msgget(HOST_KEY + 1, 0))),
    "msgsnd": _outcome(lambda: _send(HOST_MSQID)),
}

def listed():
    return _listed()
"""


def test_host_ipc_objects_are_out_of_reach(pool: SandboxPool) -> None:
    """A 0600 SysV segment and queue of the pool's user on the host: the program neither sees
    them in /proc/sysvipc nor attaches, writes or sends to them, by key or by id (on 7a049f7,
    run as an ordinary user, a program wrote into such a segment and queue; as root they were
    listed)."""
    key = 0x46000000 | secrets.randbits(20) << 2
    canary = b"the host's own data"
    shmid = host_probes.make_segment(key, canary)
    try:
        msqid = host_probes.make_queue(key + 1)
        try:
            constants = {"HOST_KEY": key, "HOST_SHMID": shmid, "HOST_MSQID": msqid}
            names = ["shmget", "shmat", "msgget", "msgsnd"]
            tests = (*_outcome_tests(names), "assert listed() == []")
            result = run(pool, _ipc_program(HOST_IPC_ATTACK, **constants), tests=tests)
            segment = host_probes.segment_bytes(shmid, len(canary))
            messages = host_probes.queue_messages(msqid)
        finally:
            host_probes.remove_id("msg", msqid)
    finally:
        host_probes.remove_id("shm", shmid)
    assert result.passed, _went_through(result, [*names, "listed"])
    assert (segment, messages) == (canary, 0)
