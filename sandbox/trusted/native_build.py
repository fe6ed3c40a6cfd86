"""The zygote's loop in C (``sandbox/isolated/_zygote.c``), built on first use with the host's
C compiler by the trusted front, not by ``pip install``: ``ray job submit --working-dir``
leaves build outputs out of the upload. Cached per node under a hash of the source and the
interpreter; without a compiler or ``Python.h`` the zygotes run the same loop in Python.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

SOURCE = Path(__file__).resolve().parent.parent / "isolated" / "_zygote.c"
BUILD_TIMEOUT_S = 120.0


def cache_dir() -> Path:
    """Where built libraries are kept: ``$XDG_CACHE_HOME/grpo-code`` (``~/.cache/grpo-code``)."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "grpo-code"


def compiler() -> list[str]:
    """The C compiler: ``$CC`` as build tools honour it, else the one the interpreter was built
    with if this host has it (a conda interpreter names conda's own), else ``cc``."""
    if os.environ.get("CC"):
        return shlex.split(os.environ["CC"])
    built_with = shlex.split(sysconfig.get_config_var("CC") or "")
    return built_with if built_with and shutil.which(built_with[0]) else ["cc"]


def build(source: Path = SOURCE) -> tuple[str | None, str]:
    """The path of the library built from ``source`` (built now if not cached), or None and
    why it could not be built."""
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    key = hashlib.sha256(source.read_bytes() + sys.version.encode() + suffix.encode())
    target = cache_dir() / f"{source.stem}-{key.hexdigest()[:16]}{suffix}"
    if target.exists():
        return str(target), ""
    include = sysconfig.get_paths()["include"]
    if not os.path.exists(os.path.join(include, "Python.h")):
        return None, f"no Python.h in {include} (install the interpreter's headers)"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, partial = tempfile.mkstemp(suffix=suffix, dir=target.parent)
        os.close(fd)
    except OSError as exc:
        return None, f"cannot write {target.parent}: {exc.strerror}"
    command = [*compiler(), "-O2", "-fPIC", "-shared", "-I", include, str(source), "-o", partial]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False
        )
        if done.returncode != 0:
            first = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[0]
            return None, f"{shlex.join(command[:1])} failed: {first}"
        os.replace(partial, target)  # atomic: pools starting together each build, one wins
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"cannot run the C compiler {shlex.join(command[:1])}: {exc}"
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    return str(target), ""
