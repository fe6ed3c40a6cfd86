"""Killing and reaping every process an execution left behind, ``setsid`` or double-forked:
the whole PID namespace from its init, else the zygote's descendants, level by level.
:func:`descendants` also serves ``python -m bench.sandbox``.
"""

from __future__ import annotations

import contextlib
import os
import signal


def kill_namespace(main: int) -> int | None:
    """As PID 1 of a PID namespace: SIGKILL every other process in it and reap them all, so
    "no child left" means "nothing left" (orphans come to init). The kill is repeated in case
    a fork completed while the first was delivered. Returns ``main``'s wait status (None if
    it was reaped before)."""
    main_status = None
    while True:
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:  # ESRCH: nothing left to kill
            return main_status
        while True:
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                break
            if pid == main:
                main_status = status


def kill_tree(main: int, root: int) -> int | None:
    """Without a PID namespace: SIGKILL ``main`` and every descendant of ``root`` (a child
    subreaper, so ``setsid`` grandchildren come to it). Returns ``main``'s wait status."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(main, signal.SIGKILL)
    try:
        _, status = os.waitpid(main, 0)
    except ChildProcessError:
        status = None
    kill_descendants(root)
    return status


def descendants(root: int) -> dict[int, list[bytes]]:
    """Every process below ``root`` (found through /proc), with the fields of its
    ``/proc/<pid>/stat`` after the command name (``[0]`` state, ``[1]`` parent, ...)."""
    stats: dict[int, list[bytes]] = {}
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
                ppid = int(fields[1])
            except (OSError, ValueError, IndexError):
                continue  # ended while we looked
            stats[int(entry)] = fields
            children.setdefault(ppid, []).append(int(entry))
    found, stack = {}, list(children.get(root, []))
    while stack:
        pid = stack.pop()
        found[pid] = stats[pid]
        stack.extend(children.get(pid, []))
    return found


def kill_descendants(root: int) -> int:
    """SIGKILL every process below ``root``, the calling process, a child subreaper; returns
    how many. The children of a killed process are re-parented to us, so killing and reaping
    children until none is left reaches the whole tree (a process with SIGKILL pending cannot
    fork). They come from ``/proc/<root>/task/<root>/children``, not a scan of ``/proc``, where
    the kernel has that file: an execution then costs the same however busy the machine."""
    killed = 0
    while found := _children(root):
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
        for pid in found:
            # ChildProcessError: a grandchild from the scan, not ours to reap (yet)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
    return killed


def _children(root: int) -> list[int]:
    try:
        with open(f"/proc/{root}/task/{root}/children", "rb") as f:
            return [int(pid) for pid in f.read().split()]
    except FileNotFoundError:
        return list(descendants(root))
