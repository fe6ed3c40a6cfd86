"""Entry point: ``python -m launch.head`` runs :mod:`launch.tools.head`."""

import sys

from launch.tools.head import main

if __name__ == "__main__":
    sys.exit(main())
