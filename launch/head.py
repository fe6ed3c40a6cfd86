"""``python -m launch.head start|stop``: a local Ray head node with the dashboard, for trying
``ray job submit`` on one machine exactly as on a cluster.

It is started from this interpreter's environment on purpose: a job's entrypoint inherits the
environment of the ``ray start`` that launched the head, so a head started elsewhere fails the
job with "No module named ...".
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path


def ray_cli() -> str:
    """The ``ray`` executable next to this interpreter."""
    return str(Path(sys.executable).with_name("ray"))


def head_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("HF_HUB_OFFLINE", "1")
    return env


def start(port: int, dashboard_port: int, metrics_port: int, num_cpus: int | None) -> None:
    command = [
        ray_cli(), "start", "--head",
        f"--port={port}",
        "--include-dashboard=true",
        "--dashboard-host=127.0.0.1",
        f"--dashboard-port={dashboard_port}",
        f"--metrics-export-port={metrics_port}",
        "--disable-usage-stats",
    ]  # fmt: skip
    if num_cpus:
        command.append(f"--num-cpus={num_cpus}")
    subprocess.run(command, check=True, env=head_env())
    print(
        f"\nRay head started. Dashboard: http://127.0.0.1:{dashboard_port}  "
        f"Prometheus metrics: http://127.0.0.1:{metrics_port}/metrics\n"
        "Submit a job (token authentication is on by default in Ray 2.60):\n"
        f"  RAY_AUTH_MODE=token {ray_cli()} job submit --address http://127.0.0.1:{dashboard_port}"
        " --working-dir . -- python -m launch.train --config configs/demo.toml --overwrite"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m launch.head", description=__doc__)
    parser.add_argument("action", choices=["start", "stop"])
    parser.add_argument("--port", type=int, default=6379)
    parser.add_argument("--dashboard-port", type=int, default=8265)
    parser.add_argument("--metrics-port", type=int, default=8080)
    parser.add_argument("--num-cpus", type=int, default=None)
    args = parser.parse_args(argv)
    if args.action == "stop":
        return subprocess.run([ray_cli(), "stop"], env=head_env()).returncode
    start(args.port, args.dashboard_port, args.metrics_port, args.num_cpus)
    return 0


if __name__ == "__main__":
    sys.exit(main())
