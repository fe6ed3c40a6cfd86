"""Emptying the scratch directory (sandbox/isolated/scratch.py) after whatever a program left; the
zygote's probe of the execution cgroup."""

from __future__ import annotations

import os
from pathlib import Path

from sandbox.isolated.scratch import clean_scratch


def _descriptors_into(path: Path) -> list[str]:
    """What this process holds open below ``path`` (by descriptor: the count of all open
    descriptors moves with whatever else the test process runs, Ray's threads among them)."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # closed while we looked
        if target == str(path) or target.startswith(f"{path}/"):
            found.append(target)
    return found


def test_a_chain_deeper_than_a_path_and_a_wide_tree_are_removed(tmp_path: Path) -> None:
    """5,000 nested directories (a path through them is longer than PATH_MAX; 1,100 made
    shutil.rmtree raise RecursionError, which ended the worker), a wide tree, files at every
    level, a link out, a directory we may not list: all gone, and no descriptor left open."""
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(5000):  # by descriptor: a path this deep cannot be named
        os.close(os.open("f", os.O_CREAT | os.O_WRONLY, dir_fd=fd))
        os.mkdir("a", dir_fd=fd)
        inner = os.open("a", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(fd)
    for i in range(50):
        leaf = tmp_path / f"w{i}" / "x" / "y"
        leaf.mkdir(parents=True)
        (leaf / "z").write_text("x")
    (tmp_path / "link").symlink_to("/etc")
    (tmp_path / "closed").mkdir(mode=0)
    clean_scratch(str(tmp_path))
    assert os.listdir(tmp_path) == []
    assert _descriptors_into(tmp_path) == []
    # (a failing run would leave a tree that pytest's own clean-up, shutil.rmtree, cannot
    # remove in later sessions: clean_scratch above is what removes it)


def test_a_missing_scratch_directory_is_no_error(tmp_path: Path) -> None:
    clean_scratch(str(tmp_path / "gone"))


def test_the_cgroup_probe_says_why_a_child_could_not_join(tmp_path: Path) -> None:
    """zygote._probe_cgroup writes as a child would: a descriptor that takes the write is
    joined (""), one that refuses it names the error (the worker then reports the weaker
    level and the pool refuses to start, rather than judging every program a runtime_error)."""
    from sandbox.isolated import zygote

    read_end, write_end = os.pipe()
    readonly = os.open(tmp_path / "f", os.O_RDONLY | os.O_CREAT)
    try:
        assert zygote._probe_cgroup((write_end,)) == ""
        assert zygote._probe_cgroup((write_end, readonly)).startswith(
            "could not join the execution cgroup: Bad file descriptor"
        )
    finally:
        for fd in (read_end, write_end, readonly):
            os.close(fd)
