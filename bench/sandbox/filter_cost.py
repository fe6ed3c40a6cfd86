"""What the seccomp filter costs a system call: ``python -m bench.sandbox.filter_cost``.

Every system call a program makes runs the zygote's filter (``sandbox/isolated/seccomp.py``),
and without a cgroup also the child's fallback filter. Prints the time of one ``getppid``, a
call that falls through every rule, with no filter, the zygote's, and both, each in a fresh
interpreter (a filter cannot be removed), best of ``--repeats`` loops of ``--calls`` calls.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOOP = """
import os, sys, time
from sandbox.isolated import seccomp, syscalls
calls, repeats, filters = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
syscalls.prctl(syscalls.PR_SET_NO_NEW_PRIVS, 1)
if "zygote" in filters:
    seccomp.install()
if "fallback" in filters:
    seccomp.Filter(fallback=True).install()
best = float("inf")
for _ in range(repeats):
    start = time.perf_counter()
    for _ in range(calls):
        os.getppid()
    best = min(best, (time.perf_counter() - start) / calls)
print(best * 1e9)
"""
CASES = {"no filter": "", "zygote's filter": "zygote", "zygote's + fallback": "zygote,fallback"}


def measure(filters: str, calls: int, repeats: int) -> float:
    """Nanoseconds per ``getppid`` under ``filters``, in a fresh interpreter."""
    args = [sys.executable, "-c", LOOP, str(calls), str(repeats), filters]
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, check=True)
    return float(done.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sandbox.filter_cost")
    parser.add_argument("--calls", type=int, default=300_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    if args.calls < 1 or args.repeats < 1:
        parser.error("--calls and --repeats must be at least 1")
    for name, filters in CASES.items():
        print(f"{name:22s} {measure(filters, args.calls, args.repeats):7.1f} ns per getppid")
    return 0


if __name__ == "__main__":
    sys.exit(main())
