import sys

from bench.learner.step import main

sys.exit(main())
