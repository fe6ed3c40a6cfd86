"""The seccomp filter's system-call tables and program (sandbox/isolated/seccomp.py).

What the filter refuses inside a real pool is tested with real programs in
tests/unit/sandbox/test_escape.py; here, that its numbers are the kernel's and that it assembles.
"""

from __future__ import annotations

import itertools
import re
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sandbox.isolated import seccomp
from tests.conftest import REPO_ROOT

HEADERS = {
    "x86_64": [Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h")],
    "aarch64": [Path("/usr/include/asm-generic/unistd.h")],
}


def _header_numbers(paths: list[Path]) -> dict[str, int]:
    numbers = {}
    for path in paths:
        for name, value in re.findall(r"#define __NR(?:3264)?_(\w+)\s+(\d+)", path.read_text()):
            numbers.setdefault(name, int(value))
    return numbers


@pytest.mark.parametrize("machine", sorted(seccomp.TABLES))
def test_tables_match_the_kernel_headers(machine):
    headers = [p for p in HEADERS[machine] if p.exists()]
    if not headers:
        pytest.skip(f"no kernel headers for {machine} here")
    kernel = _header_numbers(headers)
    _, table = seccomp.TABLES[machine]
    assert {name: kernel.get(name) for name in table} == table
    missing = {name for name in seccomp.DENIED if name not in table}
    assert missing <= {"iopl", "ioperm"} and (machine == "x86_64") == (not missing)


def test_the_filter_assembles_with_every_jump_in_range():
    returns = len(seccomp.RETURNS)
    for (arch, table), fallback in itertools.product(seccomp.TABLES.values(), (False, True)):
        code = seccomp.assemble(arch, table, x32_bit=True, fallback=fallback)
        instructions = [struct.unpack("<HBBI", code[i : i + 8]) for i in range(0, len(code), 8)]
        assert instructions[-returns:] == [(0x06, 0, 0, k) for k in seccomp.RETURNS.values()]
        for index, (_, jt, jf, _) in enumerate(instructions[:-returns]):
            assert index + 1 + max(jt, jf) < len(instructions)


def test_a_filtered_process_keeps_working_and_cannot_make_namespaces():
    """In a fresh interpreter (the filter cannot be removed): threads, fork and files work;
    unshare and mount are refused."""
    script = textwrap.dedent(
        """
        import ctypes, os, threading
        from sandbox.isolated import seccomp, syscalls
        syscalls.prctl(syscalls.PR_SET_NO_NEW_PRIVS, 1)
        seccomp.install()
        threading.Thread(target=lambda: None).start()
        pid = os.fork()
        if pid == 0:
            os._exit(7)
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 7
        libc = ctypes.CDLL(None, use_errno=True)
        assert libc.unshare(0x10000000) == -1 and ctypes.get_errno() == 1
        assert libc.mount(b"tmpfs", b"/mnt", b"tmpfs", 0, None) == -1
        print("ok")
        """
    )
    _run_filtered(script)


def _run_filtered(script: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True
    )
    assert done.stdout.strip() == "ok", done.stderr


def test_the_filter_refuses_calls_naming_pid_1_and_other_socket_families():
    """PID 1 stands for the zygote (its namespace's init): signals, limits, priority, affinity
    and pidfds aimed at it are refused, the same calls on the caller itself work (but its
    affinity: that stays its worker's CPU); SysV objects are refused; sockets other than
    local, IPv4 and IPv6 are refused."""
    script = textwrap.dedent(
        """
        import ctypes, errno, os, resource, socket
        from sandbox.isolated import seccomp, syscalls
        syscalls.prctl(syscalls.PR_SET_NO_NEW_PRIVS, 1)
        seccomp.install()
        def refused(call, *args, code=errno.EPERM):
            try:
                call(*args)
            except OSError as exc:
                return exc.errno == code
            return False
        assert refused(os.kill, 1, 0)
        assert refused(resource.prlimit, 1, resource.RLIMIT_NPROC, (0, 0))
        assert refused(os.setpriority, os.PRIO_PROCESS, 1, 19)
        assert refused(os.setpriority, os.PRIO_USER, 0, 19)
        assert refused(os.sched_setaffinity, 1, {0})
        assert refused(os.pidfd_open, 1)
        os.kill(os.getpid(), 0)
        resource.prlimit(0, resource.RLIMIT_CORE, (0, 0))
        os.setpriority(os.PRIO_PROCESS, 0, 1)
        assert refused(os.sched_setaffinity, 0, os.sched_getaffinity(0))  # off its CPU
        libc = ctypes.CDLL(None, use_errno=True)
        assert libc.shmget(0, 4096, 0o1600) == -1 and ctypes.get_errno() == errno.EPERM
        os.close(os.pidfd_open(os.getpid()))
        for family in (socket.AF_UNIX, socket.AF_INET, socket.AF_INET6):
            socket.socket(family, socket.SOCK_STREAM).close()
        socket.socketpair().__iter__().__next__().close()
        for family in (40, socket.AF_NETLINK, socket.AF_PACKET):  # 40: AF_VSOCK
            assert refused(socket.socket, family, socket.SOCK_DGRAM, code=errno.EAFNOSUPPORT)
        print("ok")
        """
    )
    _run_filtered(script)


def test_the_fallback_filter_keeps_one_process_with_threads_and_no_memfd():
    """Where no cgroup bounds memory the child adds a filter: no fork, no memfd and no SysV
    segment (each would hold memory outside RLIMIT_AS), threads still start."""
    script = textwrap.dedent(
        """
        import ctypes, errno, os, threading
        from sandbox.isolated import seccomp, syscalls
        syscalls.prctl(syscalls.PR_SET_NO_NEW_PRIVS, 1)
        seccomp.install()
        seccomp.Filter(fallback=True).install()
        done = []
        thread = threading.Thread(target=lambda: done.append(1))
        thread.start()
        thread.join()
        assert done == [1]
        libc = ctypes.CDLL(None, use_errno=True)
        assert libc.shmget(0, 4096, 0o1600) == -1 and ctypes.get_errno() == errno.EPERM
        for call in (os.fork, lambda: os.memfd_create("x")):
            try:
                call()
            except OSError as exc:
                assert exc.errno == errno.EPERM
            else:
                raise AssertionError(call)
        print("ok")
        """
    )
    _run_filtered(script)
