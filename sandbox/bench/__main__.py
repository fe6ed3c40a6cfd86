import sys

from sandbox.bench.throughput import main

sys.exit(main())
