"""A program that looks for its test's answer (tests/unit/sandbox/pool/test_stdio.py): every
file it can read, every process's command line, environment and open descriptors, and its
stdin. Answers look like ``answer-<hex>``; it prints the first one it finds. The system's and
the interpreter's files (read-only mounts of the host's, which the pool never writes; 10 GB
here) are read only where a name looks like test data (``.ans``, ``.in``...): reading all of
them would take minutes."""

import os
import re
import sys

TOLD = None  # the test puts the answer here for the control run
PATTERN = re.compile(rb"answer-[0-9a-f]{12}")


def scan(data):
    match = PATTERN.search(data)
    if match:
        print(match.group().decode())
        sys.exit(0)


def read(path, most=4 << 20):
    """What ``path`` holds now; never waits (a pipe's end, opened through /proc, would)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return b""
    chunks = []
    try:
        while most > 0 and (chunk := os.read(fd, min(most, 1 << 20))):
            chunks.append(chunk)
            most -= len(chunk)
    except OSError:  # nothing to read now (EAGAIN), or not readable at all
        pass
    finally:
        os.close(fd)
    return b"".join(chunks)


if TOLD:
    print(TOLD)
    sys.exit(0)
scan(sys.stdin.buffer.read())
for pid in os.listdir("/proc"):
    if pid.isdigit() or pid == "self":
        for name in ("cmdline", "environ"):
            scan(read(f"/proc/{pid}/{name}"))
        for fd in os.listdir(f"/proc/{pid}/fd") if os.access(f"/proc/{pid}/fd", os.R_OK) else []:
            scan(read(f"/proc/{pid}/fd/{fd}"))
skip = {"/proc", "/sys", "/dev"}
system = ("/usr", "/bin", "/sbin", "/lib", sys.prefix, sys.base_prefix)
system = tuple({os.path.realpath(p) + os.sep for p in system})
for root, dirs, files in os.walk("/"):
    dirs[:] = [d for d in dirs if os.path.join(root, d) not in skip]
    listed_only = (os.path.realpath(root) + os.sep).startswith(system)
    for name in files:
        path = os.path.join(root, name)
        if listed_only and not name.endswith((".ans", ".in", ".out", ".txt", ".json", ".yaml")):
            continue
        if os.path.isfile(path) and not os.path.islink(path):
            scan(read(path))
print("nothing found")
