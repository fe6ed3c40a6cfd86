"""Entry point: ``python -m launch.selfplay`` runs :mod:`launch.tools.selfplay`."""

import sys

from launch.tools.selfplay import main

if __name__ == "__main__":
    sys.exit(main())
