import sys

from launch.bench.step import main

sys.exit(main())
