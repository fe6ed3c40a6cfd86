"""The seccomp filter's system-call tables and program (sandbox/isolated/seccomp.py).

What the filter refuses inside a real pool is tested with real programs in
test_sandbox_escape.py; here, that its numbers are the kernel's and that it assembles.
"""

from __future__ import annotations

import re
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sandbox.isolated import seccomp
from tests.unit.sandbox_helpers import REPO_ROOT

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
    for arch, table in seccomp.TABLES.values():
        code = seccomp.assemble(arch, table, x32_bit=True)
        instructions = [struct.unpack("<HBBI", code[i : i + 8]) for i in range(0, len(code), 8)]
        assert instructions[-4:] == [(0x06, 0, 0, k) for k in seccomp.RETURNS.values()]
        for index, (_, jt, jf, _) in enumerate(instructions[:-4]):
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
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True
    )
    assert done.stdout.strip() == "ok", done.stderr
