"""A job for tests/integration/test_hosts.py: what each emulated host sees, printed as one JSON
line. Run by ``ray job submit`` on the head; one task on each host, placed by its resource."""

import json
import os
import socket
import sys
from pathlib import Path

import ray

MARKER = "/tmp/grpo-driver-marker"  # written by the driver, on the head host's /tmp


@ray.remote(num_cpus=0)
def probe(checkout: str) -> dict:
    """This host's name and address, whether it sees the driver's file, and what a write into
    the checkout does."""
    try:
        Path(checkout, "grpo-probe-write").write_text("x")
        write = "written"
    except OSError as exc:
        write = os.strerror(exc.errno)
    return {
        "name": socket.gethostname(),
        "address": ray.util.get_node_ip_address(),
        "sees_marker": os.path.exists(MARKER),
        "checkout_write": write,
    }


def main() -> None:
    ray.init(logging_level="ERROR")
    Path(MARKER).write_text("x")
    hosts = sys.argv[2:]
    seen = {
        h: ray.get(probe.options(resources={f"host_{h}": 1}).remote(sys.argv[1])) for h in hosts
    }
    seen["driver"] = {"name": socket.gethostname()}
    print("PROBE " + json.dumps(seen))


if __name__ == "__main__":
    main()
