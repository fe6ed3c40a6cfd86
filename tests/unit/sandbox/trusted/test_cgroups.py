"""Finding and making the pool's cgroups (``sandbox/trusted/cgroups.py``) on fake trees: v1
as on these machines, v2 (which these machines cannot run: their v2 mount has no
controllers), a place the pool may not write, and the groups of dead pools. The real thing is
tested through the pool in ``tests/unit/sandbox/pool/test_memory.py``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sandbox.trusted import cgroups, host

# /proc/self/cgroup and the cgroup lines of /proc/self/mountinfo of these machines
V1_CGROUP = """9:name=systemd:/
8:pids:/
4:memory:/process_api/97bd
2:cpu,cpuacct:/
0::/
"""
V1_MOUNTS = """31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
V2_CGROUP = "0::/user.slice/pool\n"
V2_MOUNTS = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"


def _dead_pid() -> int:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(done.stdout)


def test_v1_hierarchies_are_found_where_they_are_mounted():
    found = cgroups.find_hierarchies(V1_CGROUP, V1_MOUNTS, "/r")
    assert found == [
        cgroups.Hierarchy(1, ("pids",), "/r/sys/fs/cgroup/pids/"),
        cgroups.Hierarchy(1, ("memory",), "/r/sys/fs/cgroup/memory/process_api/97bd"),
        cgroups.Hierarchy(2, (), "/r/sys/fs/cgroup/unified/"),
    ]


def test_a_mount_of_part_of_the_tree_shows_only_what_is_below_it():
    mounts = "35 31 0:32 /process_api /mnt/mem rw - cgroup cgroup rw,memory\n"
    found = cgroups.find_hierarchies("4:memory:/process_api/97bd\n", mounts)
    assert found == [cgroups.Hierarchy(1, ("memory",), "/mnt/mem/97bd")]
    assert cgroups.find_hierarchies("4:memory:/elsewhere\n", mounts) == []
    spaced = "35 31 0:32 / /mnt/my\\040cgroups rw - cgroup cgroup rw,memory\n"
    assert cgroups.find_hierarchies("4:memory:/\n", spaced)[0].own == "/mnt/my cgroups/"


def test_v1_groups_are_made_with_their_limits_and_removed(tmp_path: Path):
    for controller in ("memory/process_api/97bd", "pids"):
        (tmp_path / "sys/fs/cgroup" / controller).mkdir(parents=True)
    groups, why = cgroups.open_pool_groups(
        256, 2, cgroup_text=V1_CGROUP, mountinfo_text=V1_MOUNTS, root=str(tmp_path)
    )
    assert groups is not None, why
    assert groups.describe() == "cgroup(memory,pids)"
    worker = groups.worker(1)
    memory, pids = (Path(d) for d in sorted(worker.dirs))
    assert memory.parent.parent == tmp_path / "sys/fs/cgroup/memory/process_api/97bd"
    assert memory.name == "worker-1" and memory.parent.name.startswith(cgroups.PREFIX)
    assert (memory / "memory.limit_in_bytes").read_text() == str(256 << 20)
    assert not (memory / "memory.memsw.limit_in_bytes").exists()  # not made where absent
    assert (pids / "pids.max").read_text() == "64"
    (memory / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")
    for directory in (memory, pids):  # the kernel makes these with the directory
        (directory / "cgroup.procs").touch()
    procs, oom = worker.worker_fds()
    try:
        assert len(procs) == 2 and os.pread(oom, 100, 0).endswith(b"oom_kill 3\n")
    finally:
        for fd in [*procs, oom]:
            os.close(fd)
    for group in groups.groups.values():  # fake control files would keep rmdir from working
        for directory in group.dirs:
            for entry in Path(directory).iterdir():
                entry.unlink()
    for directory in groups.dirs:
        for entry in Path(directory).iterdir():
            if entry.is_file():
                entry.unlink()
    groups.close()
    assert not any(Path(d).exists() for d in groups.dirs)


def test_v2_enables_the_controllers_below_its_own_group(tmp_path: Path):
    own = tmp_path / "sys/fs/cgroup/user.slice/pool"
    own.mkdir(parents=True)
    (own / "cgroup.controllers").write_text("cpu io memory pids\n")
    (own / "cgroup.subtree_control").write_text("\n")
    groups, why = cgroups.open_pool_groups(
        128, 1, cgroup_text=V2_CGROUP, mountinfo_text=V2_MOUNTS, root=str(tmp_path)
    )
    assert groups is not None, why
    assert (own / "cgroup.subtree_control").read_text() == "+memory +pids"
    (pool_dir,) = groups.dirs
    assert Path(pool_dir, "cgroup.subtree_control").read_text() == "+memory +pids"
    worker = Path(pool_dir, "worker-0")
    assert (worker / "memory.max").read_text() == str(128 << 20)
    assert (worker / "pids.max").read_text() == "64"


def test_no_memory_controller_or_no_place_to_write_is_said(tmp_path: Path):
    own = tmp_path / "sys/fs/cgroup/user.slice/pool"
    own.mkdir(parents=True)
    (own / "cgroup.controllers").write_text("cpu io\n")
    groups, why = cgroups.open_pool_groups(
        128, 1, cgroup_text=V2_CGROUP, mountinfo_text=V2_MOUNTS, root=str(tmp_path)
    )
    assert groups is None and "no memory controller" in why
    # v1 mounted, but our group is not there to write in (read-only, or another's)
    groups, why = cgroups.open_pool_groups(
        128, 1, cgroup_text=V1_CGROUP, mountinfo_text=V1_MOUNTS, root=str(tmp_path / "none")
    )
    assert groups is None and why.startswith("cgroup v1: cannot make the pool's group")
    groups, why = cgroups.open_pool_groups(128, 1, cgroup_text="2:cpu:/\n", mountinfo_text="")
    assert groups is None and why == "no memory controller is mounted"


def test_only_the_groups_of_dead_pools_of_this_pid_namespace_are_removed(tmp_path: Path):
    namespace = host.pid_namespace()
    dead = f"{cgroups.PREFIX}{namespace}-{_dead_pid()}-0"
    kept = [
        f"{cgroups.PREFIX}{namespace}-{os.getpid()}-0",  # alive
        f"{cgroups.PREFIX}1-{_dead_pid()}-0",  # another PID namespace
        "grpo-sandbox-test-1",  # not a pool's
    ]
    for name in [dead, *kept]:
        (tmp_path / name / "worker-0").mkdir(parents=True)
    assert cgroups.remove_stale_groups(str(tmp_path)) == [str(tmp_path / dead)]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(kept)
