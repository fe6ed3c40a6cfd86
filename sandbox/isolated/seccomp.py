"""The seccomp filters of the sandbox, classic BPF built with ``ctypes`` (no compiler needed).

The zygote's is a deny list over an otherwise open set: it refuses the system calls that could
undo the other layers (mounts, namespaces, other processes, the zygote itself) or reach into
the kernel's larger attack surfaces, and kills a process using another system-call table.
Tables for x86-64 and AArch64; elsewhere :class:`Filter` raises and the worker reports a weaker
level. docs/sandbox.md ("Seccomp") lists what is refused and why.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct

from sandbox.isolated.syscalls import check, libc

# Names refused with EPERM (clone is refused only with namespace flags; clone3 gets ENOSYS).
DENIED = (  # noqa: SIM905 (a list of 53 quoted names is harder to read)
    "mount umount2 mount_setattr open_tree move_mount fsopen fsconfig fsmount fspick "
    "pivot_root chroot unshare setns ptrace process_vm_readv process_vm_writev pidfd_getfd "
    "kcmp bpf keyctl add_key request_key perf_event_open userfaultfd io_uring_setup "
    "io_uring_enter io_uring_register init_module finit_module delete_module kexec_load "
    "kexec_file_load reboot swapon swapoff acct quotactl quotactl_fd name_to_handle_at "
    "open_by_handle_at syslog settimeofday clock_settime clock_adjtime adjtimex personality "
    "sethostname setdomainname fanotify_init lookup_dcookie vhangup iopl ioperm"
).split()

# System-call numbers per architecture (``uname -m``): (audit arch, {name: number}).
# fmt: off
TABLES: dict[str, tuple[int, dict[str, int]]] = {
    "x86_64": (
        0xC000003E,
        {
            "clone": 56, "clone3": 435, "mount": 165, "umount2": 166, "mount_setattr": 442,
            "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
            "fspick": 433, "pivot_root": 155, "chroot": 161, "unshare": 272, "setns": 308,
            "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
            "pidfd_getfd": 438, "kcmp": 312, "bpf": 321, "keyctl": 250, "add_key": 248,
            "request_key": 249, "perf_event_open": 298, "userfaultfd": 323,
            "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
            "init_module": 175, "finit_module": 313, "delete_module": 176, "kexec_load": 246,
            "kexec_file_load": 320, "reboot": 169, "swapon": 167, "swapoff": 168, "acct": 163,
            "quotactl": 179, "quotactl_fd": 443, "name_to_handle_at": 303,
            "open_by_handle_at": 304, "syslog": 103, "settimeofday": 164,
            "clock_settime": 227, "clock_adjtime": 305, "adjtimex": 159, "personality": 135,
            "sethostname": 170, "setdomainname": 171, "fanotify_init": 300,
            "lookup_dcookie": 212, "vhangup": 153, "iopl": 172, "ioperm": 173,
            "socket": 41, "socketpair": 53, "kill": 62, "tkill": 200, "tgkill": 234,
            "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297, "prlimit64": 302,
            "setpriority": 141, "sched_setaffinity": 203, "sched_setparam": 142,
            "sched_setscheduler": 144, "sched_setattr": 314, "pidfd_open": 434,
            "pidfd_send_signal": 424, "migrate_pages": 256, "move_pages": 279,
            "ioprio_set": 251, "memfd_create": 319, "memfd_secret": 447, "fork": 57,
            "vfork": 58, "shmget": 29, "msgget": 68, "semget": 64, "mq_open": 240,
        },
    ),
    "aarch64": (
        0xC00000B7,
        {
            "clone": 220, "clone3": 435, "mount": 40, "umount2": 39, "mount_setattr": 442,
            "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
            "fspick": 433, "pivot_root": 41, "chroot": 51, "unshare": 97, "setns": 268,
            "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271,
            "pidfd_getfd": 438, "kcmp": 272, "bpf": 280, "keyctl": 219, "add_key": 217,
            "request_key": 218, "perf_event_open": 241, "userfaultfd": 282,
            "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
            "init_module": 105, "finit_module": 273, "delete_module": 106, "kexec_load": 104,
            "kexec_file_load": 294, "reboot": 142, "swapon": 224, "swapoff": 225, "acct": 89,
            "quotactl": 60, "quotactl_fd": 443, "name_to_handle_at": 264,
            "open_by_handle_at": 265, "syslog": 116, "settimeofday": 170,
            "clock_settime": 112, "clock_adjtime": 266, "adjtimex": 171, "personality": 92,
            "sethostname": 161, "setdomainname": 162, "fanotify_init": 262,
            "lookup_dcookie": 18, "vhangup": 58,
            "socket": 198, "socketpair": 199, "kill": 129, "tkill": 130, "tgkill": 131,
            "rt_sigqueueinfo": 138, "rt_tgsigqueueinfo": 240, "prlimit64": 261,
            "setpriority": 140, "sched_setaffinity": 122, "sched_setparam": 118,
            "sched_setscheduler": 119, "sched_setattr": 274, "pidfd_open": 434,
            "pidfd_send_signal": 424, "migrate_pages": 238, "move_pages": 239,
            "ioprio_set": 30, "memfd_create": 279, "memfd_secret": 447, "shmget": 194,
            "msgget": 186, "semget": 190, "mq_open": 180,
        },
    ),
}
# fmt: on

# clone(2) flags that make a namespace (CLONE_NEWTIME shares its bit with the exit signal
# there, and is refused through unshare).
NAMESPACE_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000
NAMESPACE_FLAGS |= 0x20000000 | 0x40000000
CLONE_THREAD = 0x00010000
X32_SYSCALL_BIT = 0x40000000

# Calls that name a process by their first argument, refused for PID 1, the zygote (it shares
# the children's uid): a program must not lower its limits, renice or re-pin it, move its pages
# or signal it. setpriority also takes a user or a process group, which would include the
# zygote: only PRIO_PROCESS of another PID is allowed.
PID_TARGETED = (  # noqa: SIM905
    "kill tkill tgkill rt_sigqueueinfo rt_tgsigqueueinfo prlimit64 "
    "sched_setparam sched_setscheduler sched_setattr pidfd_open migrate_pages move_pages"
).split()
ZYGOTE_PID = 1
PRIO_PROCESS = 0
# Refused whatever they name: pidfd_send_signal (its target is a descriptor, which a filter
# cannot read), ioprio_set, sched_setaffinity (an execution on its neighbours' CPU could make
# them time out) and the IPC objects (which would outlive an execution in its worker).
PID_DENIED = (  # noqa: SIM905
    "pidfd_send_signal ioprio_set sched_setaffinity shmget msgget semget mq_open"
).split()
# Socket families a program may open (its network namespace has no interface up); AF_VSOCK
# reached the VM's other side, the rest is kernel surface no test needs.
SOCKET_FAMILIES = (1, 2, 10)  # AF_UNIX, AF_INET, AF_INET6
# Where no cgroup bounds an execution's memory, the child adds these: no second process (clone
# without CLONE_THREAD too; threads share the address space RLIMIT_AS bounds), no memfds.
FALLBACK_DENIED = ("fork", "vfork", "memfd_create", "memfd_secret")

# Classic BPF as seccomp reads it: struct sock_filter {u16 code; u8 jt; u8 jf; u32 k}.
_LOAD_WORD, _JEQ, _JGE, _JSET, _RETURN = 0x20, 0x15, 0x35, 0x45, 0x06
_OFFSET_NR, _OFFSET_ARCH, _OFFSET_ARG0, _OFFSET_ARG1 = 0, 4, 16, 24  # struct seccomp_data (LE)
RET_KILL_PROCESS, RET_ALLOW = 0x80000000, 0x7FFF0000
RET_ERRNO = 0x00050000
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2


# Where the filter's jumps may end: the actions it returns.
RETURNS = {
    "allow": RET_ALLOW,
    "deny": RET_ERRNO | errno.EPERM,
    "nosys": RET_ERRNO | errno.ENOSYS,
    "nofamily": RET_ERRNO | errno.EAFNOSUPPORT,
    "kill": RET_KILL_PROCESS,
}

# A jump's target: a label of RETURNS, or how many instructions to skip (0: the next one).
Target = str | int
Instruction = tuple[int, Target, Target, int]


def _when(number: int, then: list[Instruction]) -> list[Instruction]:
    """``then`` for system call ``number`` (loaded in the accumulator); it must end in a
    return, since it reloads the accumulator. Other calls skip it."""
    return [(_JEQ, 0, len(then), number), *then]


def _arch_check(arch: int, x32_bit: bool) -> list[Instruction]:
    body: list[Instruction] = [
        (_LOAD_WORD, 0, 0, _OFFSET_ARCH),
        (_JEQ, 0, "kill", arch),
        (_LOAD_WORD, 0, 0, _OFFSET_NR),
    ]
    if x32_bit:
        body.append((_JGE, "kill", 0, X32_SYSCALL_BIT))
    return body


def _body(arch: int, numbers: dict[str, int], x32_bit: bool) -> list[Instruction]:
    """The zygote's filter: refuse :data:`DENIED`, namespaces through clone, clone3 (ENOSYS),
    the calls of :data:`PID_TARGETED` naming the zygote, and socket families outside
    :data:`SOCKET_FAMILIES`. Argument words are loaded as the low 32 bits: a ``pid_t`` or an
    ``int`` family is what the kernel reads."""
    body = _arch_check(arch, x32_bit)
    denied = [name for name in (*DENIED, *PID_DENIED) if name in numbers]
    body += [(_JEQ, "deny", 0, numbers[name]) for name in denied]
    body.append((_JEQ, "nosys", 0, numbers["clone3"]))
    for name in PID_TARGETED:
        body += _when(
            numbers[name], [(_LOAD_WORD, 0, 0, _OFFSET_ARG0), (_JEQ, "deny", "allow", ZYGOTE_PID)]
        )
    body += _when(
        numbers["setpriority"],
        [
            (_LOAD_WORD, 0, 0, _OFFSET_ARG0),
            (_JEQ, 0, "deny", PRIO_PROCESS),
            (_LOAD_WORD, 0, 0, _OFFSET_ARG1),
            (_JEQ, "deny", "allow", ZYGOTE_PID),
        ],
    )
    families: list[Instruction] = [(_LOAD_WORD, 0, 0, _OFFSET_ARG0)]
    families += [(_JEQ, "allow", 0, family) for family in SOCKET_FAMILIES]
    families.append((_JEQ, "nofamily", "nofamily", 0))  # the rest (AF_UNSPEC included)
    for name in ("socket", "socketpair"):
        body += _when(numbers[name], families)
    body += _when(
        numbers["clone"],
        [(_LOAD_WORD, 0, 0, _OFFSET_ARG0), (_JSET, "deny", "allow", NAMESPACE_FLAGS)],
    )
    return [*body, (_JEQ, "allow", "allow", 0)]


def _fallback_body(arch: int, numbers: dict[str, int], x32_bit: bool) -> list[Instruction]:
    """The child's own filter where no cgroup bounds it: :data:`FALLBACK_DENIED`, and clone
    without ``CLONE_THREAD``. Stacked on the zygote's (the kernel applies the stricter)."""
    body = _arch_check(arch, x32_bit)
    body += [(_JEQ, "deny", 0, numbers[name]) for name in FALLBACK_DENIED if name in numbers]
    body += _when(
        numbers["clone"],
        [(_LOAD_WORD, 0, 0, _OFFSET_ARG0), (_JSET, "allow", "deny", CLONE_THREAD)],
    )
    return [*body, (_JEQ, "allow", "allow", 0)]


def assemble(arch: int, numbers: dict[str, int], x32_bit: bool, fallback: bool = False) -> bytes:
    """The filter's instructions, packed as the kernel reads them: the tests, then the
    returns they jump to (``fallback``: the child's filter without a cgroup)."""
    body = (_fallback_body if fallback else _body)(arch, numbers, x32_bit)
    where = {label: len(body) + i for i, label in enumerate(RETURNS)}
    out = []
    for index, (code, true, false, k) in enumerate(body):
        jt = where[true] - index - 1 if isinstance(true, str) else true
        jf = where[false] - index - 1 if isinstance(false, str) else false
        if not (0 <= jt < 256 and 0 <= jf < 256):
            raise ValueError("seccomp filter too long for 8-bit jumps")
        out.append(struct.pack("<HBBI", code, jt, jf, k))
    out += [struct.pack("<HBBI", _RETURN, 0, 0, k) for k in RETURNS.values()]
    return b"".join(out)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class Filter:
    """A filter assembled once, in the worker, and loaded with one ``prctl`` per process: the
    zygote's, or (``fallback``) the child's extra one where no cgroup bounds its memory.
    Assembling it in every child would cost a large share of an execution (docs/benchmarks.md,
    sandbox section). Raises OSError where the architecture has no table."""

    def __init__(self, fallback: bool = False) -> None:
        machine = os.uname().machine  # not platform: the zygote of every worker would import it
        if machine not in TABLES:
            raise OSError(errno.ENOSYS, f"no system-call table for {machine}")
        arch, numbers = TABLES[machine]
        code = assemble(arch, numbers, x32_bit=machine == "x86_64", fallback=fallback)
        self._buffer = ctypes.create_string_buffer(code, len(code))
        address = ctypes.cast(self._buffer, ctypes.c_void_p)
        self._program = _SockFprog(len(code) // 8, address)
        self._args = (
            PR_SET_SECCOMP,
            ctypes.c_ulong(SECCOMP_MODE_FILTER),
            ctypes.byref(self._program),
            0,
            0,
        )

    def install(self) -> None:
        """Load the filter on the calling process (and so on every process it forks). The
        kernel refuses it to a process without no-new-privileges (the worker sets it) or
        CAP_SYS_ADMIN: OSError."""
        check(libc.prctl(*self._args), "seccomp filter")


def install() -> None:
    """Assemble and install the zygote's :class:`Filter` on the calling process, once."""
    Filter().install()
