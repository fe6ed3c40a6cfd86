"""Entry point: ``python -m launch.train_verifier`` runs :mod:`launch.tools.train_verifier`."""

import sys

from launch.tools.train_verifier import main

if __name__ == "__main__":
    sys.exit(main())
