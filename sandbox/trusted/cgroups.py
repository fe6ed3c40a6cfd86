"""A cgroup per worker for its executions: memory and process limits however a program
allocates (fork, threads, memfd, shared memory, tmpfs writes, page cache), which RLIMIT_AS, of
one process, cannot bound. Every child joins its worker's *execution group* before its program
runs, through a ``cgroup.procs`` descriptor the front opened: the kernel checks the opener's
credentials on a write. The zygote stays outside, so the OOM killer picks only an execution's
processes. docs/sandbox.md, "The memory layer", has the layout and the v1 and v2 rules.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import itertools
import logging
import os
import time

from sandbox.isolated.limits import MAX_PROCESSES
from sandbox.trusted import host

log = logging.getLogger(__name__)

PREFIX = "grpo-sandbox-"
CONTROLLERS = ("memory", "pids")
_counter = itertools.count()
_REMOVE_WAIT_S = 2.0  # for the last processes of a killed worker to leave its group


@dataclasses.dataclass(frozen=True)
class Hierarchy:
    """A cgroup hierarchy that holds some of :data:`CONTROLLERS`, and this process's group in
    it (a directory)."""

    version: int  # 1 or 2
    controllers: tuple[str, ...]  # of CONTROLLERS, for v2 those the tree may enable
    own: str


def find_hierarchies(cgroup_text: str, mountinfo_text: str, root: str = "") -> list[Hierarchy]:
    """The hierarchies of ``/proc/self/cgroup`` that hold the memory or pids controller (v1),
    or the unified one (v2, controllers not yet known: ``()``), each with the directory of this
    process's group, found through the mounts of ``mountinfo_text`` (none where no mount shows
    our group). ``root`` is prefixed to every path (tests give a fake tree)."""
    mounts: list[tuple[str, str, str, set[str]]] = []  # (fstype, root, mount point, options)
    for line in mountinfo_text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        options = set(tail[2].split(","))
        mounts.append((tail[0], _unescape(fields[3]), _unescape(fields[4]), options))
    found = []
    for line in cgroup_text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, names, path = parts
        if names == "" and parts[0] == "0":
            wanted, fstype, version = None, "cgroup2", 2
        else:
            wanted = tuple(c for c in CONTROLLERS if c in names.split(","))
            fstype, version = "cgroup", 1
            if not wanted:
                continue
        for kind, mount_root, point, options in mounts:
            if kind != fstype or (wanted and not set(wanted) <= options):
                continue
            own = _below(mount_root, path)
            if own is not None:
                found.append(Hierarchy(version, wanted or (), root + os.path.join(point, own)))
                break
    return found


def _below(mount_root: str, path: str) -> str | None:
    """``path`` (a group) relative to a mount of the hierarchy at ``mount_root``, or None
    when the mount does not show it."""
    if mount_root == "/":
        return path.lstrip("/")
    if path == mount_root or path.startswith(mount_root.rstrip("/") + "/"):
        return path[len(mount_root) :].lstrip("/")
    return None


def _unescape(field: str) -> str:
    """mountinfo's octal escapes (``\\040`` for a space)."""
    if "\\" not in field:
        return field
    return field.encode().decode("unicode_escape").encode("latin-1").decode(errors="replace")


class ExecutionGroup:
    """One worker's execution group: a directory per hierarchy, memory and pids limits."""

    def __init__(self, version: int, dirs: list[str], memory_dir: str) -> None:
        self.version, self.dirs, self.memory_dir = version, dirs, memory_dir

    def worker_fds(self) -> tuple[list[int], int]:
        """Fresh descriptors for a worker process: each hierarchy's ``cgroup.procs`` (a child
        writes ``0`` to join) and the OOM counter (read-only). The caller closes them once the
        worker process has its copies."""
        procs = []
        try:
            for directory in self.dirs:
                procs.append(os.open(os.path.join(directory, "cgroup.procs"), os.O_WRONLY))
            events = "memory.oom_control" if self.version == 1 else "memory.events"
            oom = os.open(os.path.join(self.memory_dir, events), os.O_RDONLY)
        except BaseException:
            for fd in procs:
                os.close(fd)
            raise
        return procs, oom

    def peak_bytes(self) -> int | None:
        """The most memory the group held at once since it was made or last reset
        (:meth:`reset_peak`); None where the kernel keeps no peak (v2 before Linux 5.19)."""
        name = "memory.max_usage_in_bytes" if self.version == 1 else "memory.peak"
        try:
            with open(os.path.join(self.memory_dir, name), "rb") as f:
                return int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def reset_peak(self) -> None:
        """Start :meth:`peak_bytes` afresh (v1, and v2 since Linux 6.12; elsewhere a no-op)."""
        name = "memory.max_usage_in_bytes" if self.version == 1 else "memory.peak"
        with contextlib.suppress(OSError):
            _write(os.path.join(self.memory_dir, name), "0")


class PoolGroups:
    """The pool's cgroup (one directory per hierarchy) and its workers' execution groups."""

    def __init__(self, version: int, places: dict[str, str], memory_mb: int, workers: int) -> None:
        """Makes the pool's group and ``workers`` execution groups; ``places``: controller ->
        the directory this process's group has in its hierarchy (v2: the same one for
        both)."""
        self.version, self.memory_mb = version, memory_mb
        self.controllers = tuple(c for c in CONTROLLERS if c in places)
        name = f"{PREFIX}{host.pid_namespace()}-{os.getpid()}-{next(_counter)}"
        self.dirs = sorted({os.path.join(places[c], name) for c in self.controllers})
        self._dir_of = {c: os.path.join(places[c], name) for c in self.controllers}
        self.groups: dict[int, ExecutionGroup] = {}
        try:
            for directory in self.dirs:
                os.mkdir(directory, 0o755)
                if version == 2:
                    enable = " ".join(f"+{c}" for c in self.controllers)
                    _write(os.path.join(directory, "cgroup.subtree_control"), enable)
            for index in range(workers):
                self.worker(index)
        except BaseException:
            self.close(wait=False)
            raise

    def describe(self) -> str:
        """The memory layer in the pool's isolation line: ``cgroup(memory,pids)``."""
        return f"cgroup({','.join(self.controllers)})"

    def worker(self, index: int) -> ExecutionGroup:
        """Worker ``index``'s execution group, made with its limits on first use (a
        replaced worker gets the same one)."""
        group = self.groups.get(index)
        if group is None:
            dirs = [os.path.join(d, f"worker-{index}") for d in self.dirs]
            memory_dir = os.path.join(self._dir_of["memory"], f"worker-{index}")
            group = self.groups[index] = ExecutionGroup(self.version, dirs, memory_dir)
            for directory in dirs:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(directory, 0o755)
            self._limit(group)
        return group

    def _limit(self, group: ExecutionGroup) -> None:
        memory = str(self.memory_mb * 1024 * 1024)
        pids_dir = os.path.join(self._dir_of.get("pids", ""), os.path.basename(group.memory_dir))
        if self.version == 1:
            _write(os.path.join(group.memory_dir, "memory.limit_in_bytes"), memory)
            # memory + swap at the same bound: swap adds nothing (absent without swap accounting,
            # where swappiness 0 keeps the group's pages from being swapped out instead)
            _write_if_present(os.path.join(group.memory_dir, "memory.memsw.limit_in_bytes"), memory)
            _write_if_present(os.path.join(group.memory_dir, "memory.swappiness"), "0")
        else:
            _write(os.path.join(group.memory_dir, "memory.max"), memory)
            _write_if_present(os.path.join(group.memory_dir, "memory.swap.max"), "0")
            # an OOM kill takes the whole execution, not one process of it
            _write_if_present(os.path.join(group.memory_dir, "memory.oom.group"), "1")
        if "pids" in self._dir_of:
            _write(os.path.join(pids_dir, "pids.max"), str(MAX_PROCESSES))

    def close(self, wait: bool = True) -> None:
        """Remove every execution group, then the pool's (after its workers are killed;
        ``wait``: give their last processes a moment to leave)."""
        deadline = time.monotonic() + (_REMOVE_WAIT_S if wait else 0.0)
        for group in self.groups.values():
            _remove_groups(group.dirs, deadline)
        self.groups.clear()
        _remove_groups(self.dirs, deadline)


def open_pool_groups(
    memory_mb: int,
    workers: int,
    *,
    cgroup_text: str | None = None,
    mountinfo_text: str | None = None,
    root: str = "",
) -> tuple[PoolGroups | None, str]:
    """The pool's cgroup and its ``workers`` execution groups, made under this process's own
    group (v1 first, then v2), or None and why not. Removes the groups of dead pools it finds
    there. ``cgroup_text`` and ``mountinfo_text`` default to this process's; ``root``
    prefixes every path (tests)."""
    try:
        if cgroup_text is None:
            cgroup_text = _read(f"{root}/proc/self/cgroup")
        if mountinfo_text is None:
            mountinfo_text = _read(f"{root}/proc/self/mountinfo")
    except OSError as exc:
        return None, f"cannot read this process's cgroups: {exc.strerror or exc}"
    hierarchies = find_hierarchies(cgroup_text, mountinfo_text, root)
    v1 = {c: h.own for h in hierarchies if h.version == 1 for c in h.controllers}
    v2 = next((h for h in hierarchies if h.version == 2), None)
    why = []
    if "memory" in v1:
        groups, note = _try(1, v1, memory_mb, workers)
        if groups is None and "pids" in v1:  # memory alone still bounds memory
            groups, _ = _try(1, {"memory": v1["memory"]}, memory_mb, workers)
            if groups is not None:
                log.warning("sandbox: no pids cgroup for executions (%s): RLIMIT_NPROC only", note)
        if groups is not None:
            return groups, ""
        why.append(f"cgroup v1: {note}")
    if v2 is not None:
        places, note = _v2_places(v2.own)
        if places:
            groups, note = _try(2, places, memory_mb, workers)
            if groups is not None:
                return groups, ""
        why.append(f"cgroup v2: {note}")
    if not why:
        why.append("no memory controller is mounted")
    return None, "; ".join(why)


def _v2_places(own: str) -> tuple[dict[str, str], str]:
    """v2: enable the controllers below our own group; returns controller -> ``own`` for
    those it could, or ({}, why not)."""
    try:
        available = _read(os.path.join(own, "cgroup.controllers")).split()
    except OSError as exc:
        return {}, f"cannot read {own}/cgroup.controllers: {exc.strerror or exc}"
    wanted = [c for c in CONTROLLERS if c in available]
    if "memory" not in wanted:
        return {}, f"no memory controller in {own}/cgroup.controllers"
    control = os.path.join(own, "cgroup.subtree_control")
    try:
        enabled = _read(control).split()
        missing = [c for c in wanted if c not in enabled]
        if missing:
            _write(control, " ".join(f"+{c}" for c in missing))
    except OSError as exc:
        if exc.errno == errno.EBUSY:
            return {}, (
                f"{own} holds processes, so the kernel will not let the memory controller "
                "below it (v2's no-internal-process rule); start the pool in a group of its "
                "own whose parent delegates memory and pids"
            )
        return {}, f"cannot enable {' '.join(wanted)} in {control}: {exc.strerror or exc}"
    return {c: own for c in wanted}, ""


def _try(
    version: int, places: dict[str, str], memory_mb: int, workers: int
) -> tuple[PoolGroups | None, str]:
    for place in set(places.values()):
        remove_stale_groups(place)
    try:
        return PoolGroups(version, places, memory_mb, workers), ""
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        return None, f"cannot make the pool's group: {exc.strerror or exc}{where}"


def remove_stale_groups(place: str) -> list[str]:
    """Remove the groups under ``place`` of pools whose process is gone; returns them. Only
    pools of this PID namespace: another's processes cannot be seen from here, and ``rmdir``
    would take an idle pool's (empty) groups from under it."""
    removed = []
    namespace = host.pid_namespace()
    try:
        entries = list(os.scandir(place))
    except OSError:
        return removed
    for entry in entries:
        parts = entry.name[len(PREFIX) :].split("-")
        if not entry.name.startswith(PREFIX) or len(parts) != 3 or parts[0] != namespace:
            continue
        if not all(p.isdigit() for p in parts) or host.alive(int(parts[1])):
            continue
        with contextlib.suppress(OSError):
            workers = [e.path for e in os.scandir(entry.path) if e.is_dir()]
            _remove_groups([*workers, entry.path], time.monotonic())
            removed.append(entry.path)
    return removed


def _remove_groups(dirs: list[str], deadline: float) -> None:
    """``rmdir`` each (children first), retrying ``EBUSY`` until ``deadline``."""
    for directory in dirs:
        while True:
            try:
                os.rmdir(directory)
            except FileNotFoundError:
                pass
            except OSError as exc:
                if exc.errno == errno.EBUSY and time.monotonic() < deadline:
                    time.sleep(0.01)
                    continue
                log.warning("sandbox: could not remove cgroup %s: %s", directory, exc)
            break


def _write(path: str, value: str) -> None:
    """One write, as cgroupfs wants (``O_CREAT`` is harmless there and makes a fake tree's
    files in tests)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _write_if_present(path: str, value: str) -> None:
    if os.path.exists(path):
        _write(path, value)


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()
