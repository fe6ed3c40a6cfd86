"""``python -m launch.scale RUN_DIR --rollout-actors N``: resize the rollout fleet of a running
job (the control file it writes and how the driver reads it: :mod:`launch.loop.control`)."""

import argparse
import sys
from pathlib import Path

from common.help_format import DefaultsHelpFormatter
from launch.loop.control import request_resize


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        formatter_class=DefaultsHelpFormatter,
        prog="python -m launch.scale",
        description="Resize the rollout fleet of a running job.",
    )
    parser.add_argument("run_dir", type=Path, help="the run directory, e.g. runs/demo")
    parser.add_argument("--rollout-actors", type=int, required=True)
    args = parser.parse_args(argv)
    try:
        path = request_resize(args.run_dir, args.rollout_actors)
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"requested {args.rollout_actors} rollout actor(s) in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
