"""Entry point: ``python -m launch.evaluate`` runs :mod:`launch.tools.evaluate`."""

import sys

from launch.tools.evaluate import main

if __name__ == "__main__":
    sys.exit(main())
