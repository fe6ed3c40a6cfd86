import sys

from bench.launch.step import main

sys.exit(main())
