"""``python -m launch.scale RUN_DIR --rollout-actors N``: see :mod:`launch.control`."""

import sys

from launch.control import main

if __name__ == "__main__":
    sys.exit(main())
