"""Programs that try to get out of the sandbox, run through a real pool; prints one JSON
object, attack name -> verdict ("passed" means the attempt was refused).

Run by tests/unit/sandbox/test_escape.py in a fresh interpreter, as root and as an ordinary
user: ``python tests/unit/sandbox/escape_attempts.py '{"canary": ..., "venv_site": ..., ...}'``.
Each attack is one program whose test asserts ``attack() == "refused"``: the program
computes, the trusted side compares, and a program that crashed or escaped fails the test
with what it returned in the detail.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from common.config import SandboxConfig
from common.types import ExecutionJob
from sandbox.trusted.pool import SandboxPool

# What every attack program starts with: raw system calls through ctypes, and the verdict
# "refused" when the call failed, else what got through.
PRELUDE = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
CANARY, VENV_SITE, PROJECT, HOME = {canary!r}, {venv_site!r}, {project!r}, {home!r}
def outcome(result, what):
    return "refused" if result < 0 else f"escaped: {{what}} returned {{result}}"
def wrote(path):
    try:
        with open(path, "w") as f:
            f.write("import os; os.system('touch /tmp/pwned')\\n")
    except OSError:
        return False
    return True
"""

ATTACKS = {
    # Clear the read-only flag of every mount (CAP_SYS_ADMIN in the worker's namespace used to
    # allow it), then plant a .pth file in the user's venv, which would run outside.
    "clear_read_only": """
        class Attr(ctypes.Structure):
            _fields_ = [(n, ctypes.c_uint64) for n in ("set", "clr", "prop", "userns")]
        def attack():
            attr = Attr(0, 1, 0, 0)  # clear MOUNT_ATTR_RDONLY
            r = libc.syscall(442, -100, b"/", 0x8000, ctypes.byref(attr), ctypes.c_size_t(32))
            if wrote(os.path.join(VENV_SITE, "evil_a.pth")):
                return "escaped: wrote a .pth file into the venv"
            return outcome(r, "mount_setattr clearing read-only")
    """,
    "remount_writable": """
        def attack():
            r = libc.mount(None, VENV_SITE.encode(), None, ctypes.c_ulong(0x20 | 0x1000), None)
            if wrote(os.path.join(VENV_SITE, "evil_b.pth")):
                return "escaped: wrote a .pth file into the venv"
            return outcome(r, "remount without MS_RDONLY")
    """,
    "write_venv": """
        def attack():
            if wrote(os.path.join(VENV_SITE, "evil_c.pth")) or wrote(PROJECT + "/evil.py"):
                return "escaped: wrote into the venv or the project"
            return "refused"
    """,
    # Unmount the empty tmpfs that hides the home directory, then read what it covered.
    "unmount_hiding": """
        def attack():
            r = libc.umount2(HOME.encode(), 2)  # MNT_DETACH
            try:
                return "escaped: read " + open(CANARY).read()
            except OSError:
                return outcome(r, "umount2 of the hiding tmpfs")
    """,
    "read_home": """
        def attack():
            try:
                return "escaped: read " + open(CANARY).read()
            except OSError:
                return "refused"
    """,
    "mount_tmpfs": """
        def attack():
            return outcome(libc.mount(b"tmpfs", b"/tmp", b"tmpfs", 0, None), "mount tmpfs")
    """,
    "new_namespaces": """
        def attack():
            return outcome(libc.unshare(0x10000000 | 0x00020000), "unshare(user, mount)")
    """,
    "clone_new_user": """
        def attack():
            pid = libc.syscall(56 if os.uname().machine == "x86_64" else 220,
                               ctypes.c_long(0x10000000 | 17), 0, 0, 0, 0)
            if pid == 0:
                os._exit(0)
            return outcome(pid, "clone(CLONE_NEWUSER)")
    """,
    "join_namespace": """
        def attack():
            try:
                fd = os.open("/proc/1/ns/mnt", os.O_RDONLY)
            except OSError:
                return "refused"
            return outcome(libc.setns(fd, 0), "setns into the zygote's namespace")
    """,
    "open_tree": """
        def attack():
            return outcome(libc.syscall(428, -100, b"/", 1), "open_tree(OPEN_TREE_CLONE)")
    """,
    "ptrace_zygote": """
        def attack():
            return outcome(libc.ptrace(16, 1, None, None), "ptrace(PTRACE_ATTACH, zygote)")
    """,
    "read_zygote_memory": """
        def attack():
            try:
                with open("/proc/1/mem", "rb") as f:
                    return "escaped: opened the zygote's memory"
            except OSError:
                return "refused"
    """,
}

# The layers under the seccomp filter, seen from inside (the filter refuses each attack above
# before the lock or the capabilities are reached, so they are checked here directly): no
# capability in any set, and a user namespace that maps only the sandbox id.
ATTACKS["capabilities_or_ids_left"] = """
    def attack():
        status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines())
        caps = {k: int(status[k], 16) for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")}
        ids = open("/proc/self/uid_map").read().split()
        if any(caps.values()):
            return f"escaped: capabilities {caps}"
        if len(ids) != 3 or ids[0] != "1000" or ids[2] != "1":
            return f"escaped: uid map {ids}"
        return "refused"
"""

# The harness can tell an attempt that worked: a write into the scratch directory does.
CONTROL = """
    def attack():
        return "refused" if wrote("scratch-file") else "the scratch directory is not writable"
"""


def main(paths: dict) -> dict:
    prelude = PRELUDE.format(**paths)
    config = SandboxConfig(num_workers=1, timeout_s=5.0, test_timeout_s=5.0, cache=False)
    names = [*ATTACKS, "control"]
    jobs = [
        ExecutionJob(prelude + textwrap.dedent(code), ('assert attack() == "refused"',), "")
        for code in [*ATTACKS.values(), CONTROL]
    ]
    with SandboxPool(config) as pool:
        results = pool.run(jobs)
        level = pool.isolation
    out = {name: f"{r.verdict.value} {r.detail}".strip() for name, r in zip(names, results)}
    return {"isolation": level, "verdicts": out}


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
