"""The execution's scratch directory: a private, size- and inode-limited tmpfs, mounted once per
worker and emptied by the worker's server after every execution that wrote to it."""

from __future__ import annotations

import contextlib
import os

from sandbox.isolated.syscalls import MS_NODEV, MS_NOSUID, mount

SCRATCH_MB = 64
SCRATCH_INODES = 4096  # bounds what clean_scratch walks after a program made many files


def mount_scratch(scratch: str, owner: int) -> None:
    """A size- and inode-limited tmpfs on the scratch directory, owned by ``owner``."""
    options = f"size={SCRATCH_MB}m,nr_inodes={SCRATCH_INODES},mode=0700"
    mount("tmpfs", scratch, "tmpfs", MS_NOSUID | MS_NODEV, options)
    os.chown(scratch, owner, owner)


def clean_scratch(scratch: str) -> None:
    """Empty the scratch directory after an execution (only the worker runs by then); never
    raises, whatever the program left there: an exception would end the worker.

    The tmpfs is never replaced: the zygote's locked mount namespace holds a copy of this
    mount, which would not see a new one. The walk is iterative and holds one descriptor,
    reaching each directory from its parent's, never by path or recursion: a program may leave
    a chain of directories deeper than a path or Python's stack may be.
    """
    try:
        fd = os.open(scratch, _DIRECTORY)
    except OSError:
        return
    try:
        levels = [os.listdir(fd)]  # names still to remove, per directory of the walk
        if levels[0]:
            _empty(fd, levels)
    except OSError:
        pass
    finally:
        os.close(fd)


_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def _empty(fd: int, levels: list[list[str]]) -> None:
    """Remove every entry below the directory ``fd`` (``levels``: its listing); keeps the
    descriptor it walks with in ``fd``'s place, so the caller's one close is enough."""
    top, entered = fd, []  # the names of the directories descended into
    try:
        while levels:
            if not levels[-1]:
                levels.pop()
                if not entered:
                    break
                parent = os.open("..", _DIRECTORY, dir_fd=fd)
                os.close(fd)
                fd = parent
                with contextlib.suppress(OSError):
                    os.rmdir(entered.pop(), dir_fd=fd)
                continue
            name = levels[-1].pop()
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=fd)
                continue
            with contextlib.suppress(OSError):
                os.rmdir(name, dir_fd=fd)
                continue
            try:
                inner = os.open(name, _DIRECTORY, dir_fd=fd)
            except OSError:
                continue  # neither a file nor a directory we may open: left as it is
            try:
                names = os.listdir(inner)
            except OSError:
                os.close(inner)
                continue
            if fd != top:
                os.close(fd)
            fd = inner
            levels.append(names)
            entered.append(name)
    finally:
        if fd != top:
            os.close(fd)
