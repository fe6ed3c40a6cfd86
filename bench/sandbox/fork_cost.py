"""What a smaller zygote could save: ``python -m bench.sandbox.fork_cost``.

Each pool execution is one fork of the worker's zygote and one exit of the child; both cost in
proportion to the pages the forking process holds (page tables copied, then torn down). Prints
the CPU and wall time of a fork, an immediate ``_exit`` and the ``waitpid`` in a bare
``python -I -S`` (the smallest zygote a Python program could run in) and with ``--extra-mb``
more of touched heap (the pool's zygote holds ~4 MB more than a bare interpreter), each size in
a fresh interpreter, the sizes interleaved over ``--rounds``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

LOOP = """
import os, resource, sys, time
extra_mb, count = float(sys.argv[1]), int(sys.argv[2])
heap = [bytearray(4096) for _ in range(int(extra_mb * 256))]
for page in heap:
    page[0] = 1
def cpu():
    usage = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return sum(u.ru_utime + u.ru_stime for u in usage)
for timed in (False, True):
    wall, used = time.perf_counter(), cpu()
    for _ in range(count):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    wall, used = time.perf_counter() - wall, cpu() - used
with open("/proc/self/status") as status:
    anon = next(line.split()[1] for line in status if line.startswith("RssAnon"))
print(f"{anon} {used / count * 1e3:.3f} {wall / count * 1e3:.3f}")
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sandbox.fork_cost")
    parser.add_argument("--extra-mb", type=float, nargs="+", default=[0.0, 4.0, 8.0])
    parser.add_argument("--forks", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    print("round  extra heap  RssAnon  CPU per fork+exit  wall per fork+exit")
    for round_ in range(1, args.rounds + 1):
        for extra in args.extra_mb:
            done = subprocess.run(
                [sys.executable, "-I", "-S", "-c", LOOP, str(extra), str(args.forks)],
                capture_output=True,
                text=True,
                check=True,
            )
            anon, cpu_ms, wall_ms = done.stdout.split()
            print(f"{round_:5}  {extra:7.1f} MB  {anon:>5} kB  {cpu_ms:>12} ms  {wall_ms:>15} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
