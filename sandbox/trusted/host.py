"""What the front asks of the host about processes: which PID namespace it runs in, and whether
a process still lives. Both name what a pool leaves on the machine (its temporary directory,
its cgroups) so that the next pool can tell a dead pool's leftovers from a live one's."""

from __future__ import annotations

import os


def pid_namespace() -> str:
    """The inode of this process's PID namespace (``0`` where /proc does not say)."""
    try:
        return os.readlink("/proc/self/ns/pid").split("[")[1].rstrip("]")
    except (OSError, IndexError):
        return "0"


def alive(pid: int) -> bool:
    """Whether ``pid`` names a live process in this PID namespace (one we may not signal
    lives too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
