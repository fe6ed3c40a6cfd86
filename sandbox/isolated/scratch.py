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
    """Empty the scratch directory after an execution (only the worker runs by then).

    An untouched directory (most executions) costs one ``listdir``; otherwise its entries
    are removed. The tmpfs itself is never replaced: the zygote's locked mount namespace
    (``namespaces.lock_down``) holds a copy of this mount, made when it locked, which would not
    see a new one; removing the files frees their space in the one tmpfs both see, and its
    inode limit bounds the walk.
    """
    try:
        entries = os.listdir(scratch)
    except OSError:
        return
    for entry in entries:
        path = os.path.join(scratch, entry)
        if os.path.isdir(path) and not os.path.islink(path):
            import shutil  # lazy: at the top it would load zlib, bz2 and lzma into every zygote

            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(path)
