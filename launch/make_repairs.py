"""Entry point: ``python -m launch.make_repairs`` runs :mod:`launch.tools.make_repairs`."""

import sys

from launch.tools.make_repairs import main

if __name__ == "__main__":
    sys.exit(main())
