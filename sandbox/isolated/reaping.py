"""Killing and reaping every process an execution left behind, ``setsid`` or double-forked.

The zygote calls it after each execution: as PID 1 of the worker's PID namespace it kills the
whole namespace (:func:`kill_namespace`); without one it is a child subreaper and kills its
descendants level by level (:func:`kill_tree`). :func:`descendants` also serves
``python -m sandbox.bench``, which sums the CPU time of the pool's processes.
"""

from __future__ import annotations

import contextlib
import os
import signal


def kill_namespace(main: int) -> int | None:
    """As PID 1 of a PID namespace: SIGKILL every other process in it and reap them all.

    ``kill(-1)`` from a namespace's init reaches every process of the namespace but itself,
    and every orphan is re-parented to init, so "no child left" means "nothing left". A
    process cannot fork once SIGKILL is pending, so the loop ends; it repeats the kill in case
    a fork completed while the first one was being delivered. Returns ``main``'s wait status
    (None if it was reaped before).
    """
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
    """Without a PID namespace: SIGKILL ``main`` and every descendant of ``root``.

    The zygote is then a child subreaper, so ``setsid`` grandchildren are re-parented to it
    instead of escaping to the host's init, and :func:`kill_descendants` reaches them.
    Returns ``main``'s wait status.
    """
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
    how many.

    Kill every child and reap it; the children of a killed process are re-parented to us, so
    repeating that reaches the whole tree, level by level, and ends, since a process with
    SIGKILL pending cannot fork. The children come from ``/proc/<root>/task/<root>/children``,
    one small file, so an execution costs the same however many processes the machine runs.
    A kernel without that file (``CONFIG_PROC_CHILDREN``) gets a scan of ``/proc``.
    """
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
