"""``python -m launch.scale RUN_DIR --rollout-actors N``: see :mod:`launch.loop.control`."""

import sys

from launch.loop.control import main

if __name__ == "__main__":
    sys.exit(main())
