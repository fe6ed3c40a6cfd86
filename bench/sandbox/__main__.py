import sys

from bench.sandbox import stdio, throughput

# ``--stdio`` picks the stdin/stdout bench; each bench has its own flags and ``--help``.
argv = sys.argv[1:]
sys.exit(stdio.main(argv) if "--stdio" in argv else throughput.main(argv))
