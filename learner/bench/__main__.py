import sys

from learner.bench.step import main

sys.exit(main())
