"""``python -m launch.tools.hosts up|down|exec``: several machines emulated on this one, each with
its own network address and its own disk, joined into one Ray cluster.

What breaks first on a real cluster is what one Ray node cannot show: an address that is not the
loopback, a path that exists on one machine only, a machine that disappears. Linux namespaces
give each emulated host what a machine has of its own:

- a **network namespace** with one interface (``eth0``) on a bridge, and its own address
  (``10.77.0.10`` for the head, ``.11``, ``.12``... for the workers, ``.2`` for the client);
- a **mount namespace** in which its ``/tmp``, its home (``$HOME``: ``/root`` as root runs it)
  and ``/dev/shm`` are its own, and the real home and what sits beside the checkout (datasets,
  other checkouts) are hidden: the interpreter stays visible, and the checkout with its venv,
  read-only, as a machine has the code installed (and ``/sys/fs/cgroup``, so the sandbox pool
  keeps its full isolation). The client sees the checkout writable, as a user's machine does:
  ``ray job submit --working-dir .`` ships it from there;
- its own host name (a UTS namespace).

``up`` builds them, starts the head with ``launch.head`` (token authentication, the dashboard on
the head's address), copies the token to every other host's home as a user copies it, and joins
each worker with ``ray start --address``; each worker has a custom resource ``host_<name>`` so a
test can place an actor on it. ``add`` makes one more worker and joins it to the running cluster
(a machine added mid-run), ``exec HOST -- CMD`` runs a command on one host, ``down`` kills every
process of every host and removes the namespaces, the interfaces and the hosts' disks.
Root only (namespaces and interfaces need it); docs/cluster.md has the recipe.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from common.help_format import DefaultsHelpFormatter

#: Where the hosts' disks live: not under ``/tmp``, which each host replaces with its own.
STATE = Path("/var/tmp/grpo-hosts")
PREFIX = "gh"  # of every namespace and interface made here (interface names: 15 bytes at most)
SUBNET = "10.77.0"
HEAD, CLIENT = "head", "client"
RAY_PORT, DASHBOARD_PORT = 6379, 8265
REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Host:
    """One emulated machine: its name, address, network namespace and disk (``tmp/``,
    ``home/``), and whether it sees the checkout."""

    name: str
    address: str
    netns: str
    disk: str
    sees_checkout: bool

    @property
    def home(self) -> Path:
        return Path(self.disk) / "home"


def address_of(index: int) -> str:
    """The head is index 0 (``.10``), the workers 1, 2... (``.11``, ``.12``)."""
    return f"{SUBNET}.{10 + index}"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def _hidden() -> list[Path]:
    """What a host does not see: the real home and the checkout's parent (where datasets and
    other checkouts sit beside it), unless that is inside the home."""
    home = Path.home().resolve()
    return [home] + ([] if REPO.parent.is_relative_to(home) else [REPO.parent])


def _visible(host: Host) -> list[tuple[Path, bool]]:
    """What a host sees inside the hidden directories, and whether read-only: the interpreter,
    and the checkout with its venv, as a machine has the code installed: read-only on the
    cluster's hosts (a write there, which a shared file system would have hidden, fails), as
    it is on the client. Parents first: each is bound after the ones it is inside."""
    paths = {Path(sys.base_prefix).resolve(), REPO, Path(sys.prefix).resolve()}
    return [(path, not host.sees_checkout) for path in sorted(paths)]


def _prelude(host: Host, cwd: Path | None) -> str:
    """The shell lines that make ``host``'s mount namespace (run inside a fresh one)."""
    keep, home = Path(host.disk) / ".keep", Path.home().resolve()
    lines = ["set -e", "mount --make-rprivate /", f"hostname {host.name}"]
    visible = _visible(host)
    for i, (path, _) in enumerate(visible):  # kept aside before their parents are hidden
        lines.append(f"mkdir -p {keep}/{i} && mount --bind {path} {keep}/{i}")
    for path in _hidden():
        source = f"--bind {host.home}" if path == home else "-t tmpfs tmpfs"
        lines.append(f"mount {source} {path}")
    for i, (path, read_only) in enumerate(visible):
        lines.append(f"mkdir -p {path} && mount --bind {keep}/{i} {path}")
        if read_only:
            lines.append(f"mount -o remount,bind,ro {path}")
    lines += [
        f"mount --bind {host.disk}/tmp /tmp",
        "mount -t tmpfs tmpfs /dev/shm",
        f"mount -t tmpfs tmpfs {STATE}",  # the other hosts' disks, and this one's, hidden
        f"cd {cwd or home}",
    ]
    return "\n".join(lines)


def command(host: Host, argv: list[str], cwd: Path | None = None) -> list[str]:
    """``argv`` as it runs on ``host``: in its network namespace, in a new mount and UTS
    namespace made by :func:`_prelude`, with ``HOME`` its own, in ``cwd`` (else its home)."""
    script = _prelude(host, cwd) + f'\nexport HOME={Path.home().resolve()}\nexec "$@"'
    return [
        "nsenter", f"--net=/run/netns/{host.netns}",
        "unshare", "--mount", "--uts", "--propagation", "private",
        "sh", "-c", script, host.name, *argv,
    ]  # fmt: skip


class Hosts:
    """The emulated machines of one cluster, saved in ``STATE/hosts.json`` so that another
    process (``down``, ``exec``) finds them."""

    def __init__(self, state: Path = STATE) -> None:
        self.state = state
        self.hosts: dict[str, Host] = {}
        saved = state / "hosts.json"
        if saved.is_file():
            self.hosts = {h["name"]: Host(**h) for h in json.loads(saved.read_text())}

    def make(self, workers: int) -> None:
        """The bridge, then the head, ``workers`` workers and the client."""
        self.down()  # leftovers of a run that did not clean up
        self.state.mkdir(parents=True, mode=0o700)
        _ip("link", "add", f"{PREFIX}-br", "type", "bridge")
        _ip("addr", "add", f"{SUBNET}.1/24", "dev", f"{PREFIX}-br")
        _ip("link", "set", f"{PREFIX}-br", "up")
        self._add(HEAD, address_of(0), sees_checkout=False)
        for _ in range(workers):
            self.add_worker()
        self._add(CLIENT, f"{SUBNET}.2", sees_checkout=True)
        self._save()

    def add_worker(self) -> Host:
        """One more worker host (``w<N>``, the next address), as a machine added to a running
        cluster is: :func:`join` makes it a Ray node."""
        index = sum(1 for name in self.hosts if name.startswith("w")) + 1
        self._add(f"w{index}", address_of(index), sees_checkout=False)
        self._save()
        return self.hosts[f"w{index}"]

    def _save(self) -> None:
        (self.state / "hosts.json").write_text(json.dumps([asdict(h) for h in self.hosts.values()]))

    def _add(self, name: str, address: str, sees_checkout: bool) -> None:
        host = Host(name, address, f"{PREFIX}-{name}", str(self.state / name), sees_checkout)
        for sub in ("tmp", "home"):
            (Path(host.disk) / sub).mkdir(parents=True, mode=0o700)
        (Path(host.disk) / "tmp").chmod(0o1777)
        link = f"{PREFIX}-{name}"
        _ip("netns", "add", host.netns)
        _ip("link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", host.netns)
        _ip("link", "set", link, "master", f"{PREFIX}-br", "up")
        for args in (
            ("addr", "add", f"{address}/24", "dev", "eth0"),
            ("link", "set", "eth0", "up"),
            ("link", "set", "lo", "up"),
        ):
            _ip("netns", "exec", host.netns, "ip", *args)
        self.hosts[name] = host

    def run(
        self,
        name: str,
        argv: list[str],
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        **kwargs: object,
    ) -> subprocess.CompletedProcess:
        """``argv`` on host ``name`` in ``cwd`` (else its home), to its end."""
        full = {**os.environ, **(env or {})}
        return subprocess.run(command(self.hosts[name], argv, cwd), env=full, **kwargs)

    def kill(self, name: str) -> None:
        """Every process on host ``name`` (its Ray node and all it started), at once."""
        _kill_all(self.hosts[name].netns)

    def down(self) -> None:
        """Every host's processes killed, namespaces, interfaces and disks removed: also those
        of an earlier run this process does not know of (by their prefix)."""
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        for netns in [
            line.split()[0] for line in listed.splitlines() if line.startswith(f"{PREFIX}-")
        ]:
            _kill_all(netns)
            subprocess.run(["ip", "netns", "del", netns], capture_output=True)
        links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
        for line in links.splitlines():
            link = line.split(":")[1].strip().split("@")[0]
            if link.startswith(f"{PREFIX}-"):
                subprocess.run(["ip", "link", "del", link], capture_output=True)
        shutil.rmtree(self.state, ignore_errors=True)
        self.hosts = {}


def _kill_all(netns: str) -> None:
    """SIGKILL to every process in network namespace ``netns``."""
    listed = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True)
    for pid in listed.stdout.split():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)


# ---- the Ray cluster on them -------------------------------------------------------------------


def token_env(host: Host) -> dict[str, str]:
    """What a Ray client or node on ``host`` needs: token authentication, its token file in its
    own home (``launch.head``'s default place)."""
    return {"RAY_AUTH_MODE": "token", "HOME": str(Path.home().resolve())}


def start_cluster(
    hosts: Hosts, cpus: int, timeout_s: float = 120.0, more: dict[str, int] | None = None
) -> None:
    """The head through ``launch.head`` on the head host, the token copied to every other
    host's home, each worker joined with ``ray start --address``, each node offering ``cpus``
    CPUs (``more``: another count for the hosts it names); returns once every worker is a
    live node of the cluster (or raises ``RuntimeError`` naming the ones that are not)."""
    head, counts = hosts.hosts[HEAD], {name: cpus for name in hosts.hosts} | (more or {})
    python = str(Path(sys.prefix) / "bin" / "python")
    started = hosts.run(
        HEAD,
        [python, "-m", "launch.head", "start", "--dashboard-host", "0.0.0.0",
         f"--num-cpus={counts[HEAD]}", "--", f"--node-ip-address={head.address}",
         '--resources={"host_head": 1}'],
        env={"PYTHONPATH": str(REPO)}, capture_output=True, text=True,
    )  # fmt: skip
    if started.returncode:
        raise RuntimeError(f"the head did not start: {started.stderr.strip()[-2000:]}")
    _copy_token(hosts, CLIENT)
    for host in hosts.hosts.values():
        if host.name not in (HEAD, CLIENT):
            join(hosts, host.name, counts[host.name])
    wait_for_nodes(hosts, len(hosts.hosts) - 1, timeout_s)


def _copy_token(hosts: Hosts, name: str) -> None:
    """The head's token into host ``name``'s home, as a user copies it."""
    token = (hosts.hosts[HEAD].home / ".ray" / "auth_token").read_bytes()
    (hosts.hosts[name].home / ".ray").mkdir(mode=0o700, exist_ok=True)
    path = hosts.hosts[name].home / ".ray" / "auth_token"
    path.write_bytes(token)
    path.chmod(0o600)


def join(hosts: Hosts, name: str, cpus: int) -> None:
    """Worker ``name`` joins the head's cluster with ``ray start --address``, offering ``cpus``
    CPUs and its custom resource ``host_<name>`` (returns once ``ray start`` has; the node is
    live when :func:`wait_for_nodes` counts it)."""
    host, head = hosts.hosts[name], hosts.hosts[HEAD]
    _copy_token(hosts, name)
    ray = str(Path(sys.prefix) / "bin" / "ray")
    joined = hosts.run(
        name,
        [ray, "start", f"--address={head.address}:{RAY_PORT}", f"--num-cpus={cpus}",
         f"--node-ip-address={host.address}", f"--resources={{\"host_{name}\": 1}}",
         "--disable-usage-stats"],
        env=token_env(host), capture_output=True, text=True,
    )  # fmt: skip
    if joined.returncode:
        raise RuntimeError(f"{name} did not join: {joined.stderr.strip()[-2000:]}")


def alive_nodes(hosts: Hosts) -> list[str]:
    """The addresses of the cluster's live nodes, as the head sees them."""
    probe = (
        "import json, ray; ray.init(address='auto', logging_level='ERROR'); "
        "print('NODES', json.dumps(sorted(n['NodeManagerAddress'] for n in ray.nodes() "
        "if n['Alive'])))"
    )
    python = str(Path(sys.prefix) / "bin" / "python")
    env = token_env(hosts.hosts[HEAD])
    done = hosts.run(HEAD, [python, "-c", probe], env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"cannot list the cluster's nodes: {done.stderr.strip()[-2000:]}")
    line = next(x for x in done.stdout.splitlines() if x.startswith("NODES "))
    return json.loads(line.removeprefix("NODES "))


def wait_for_nodes(hosts: Hosts, count: int, timeout_s: float) -> list[str]:
    """Until exactly ``count`` nodes are alive (joined, or the dead ones noticed); their
    addresses. ``RuntimeError`` after ``timeout_s``: a node that never registers is a failure
    to report, not a reason to wait forever."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:  # the head's own view may fail to come while a node dies: asked again
            nodes, seen = alive_nodes(hosts), ""
        except RuntimeError as exc:
            nodes, seen = [], f" ({exc})"
        if len(nodes) == count:
            return nodes
        if time.monotonic() > deadline:
            raise RuntimeError(f"not {count} nodes alive after {timeout_s:.0f} s: {nodes}{seen}")
        time.sleep(1.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m launch.tools.hosts",
        description=__doc__,
        formatter_class=DefaultsHelpFormatter,
    )
    sub = parser.add_subparsers(dest="action", required=True)
    up = sub.add_parser("up", help="make the hosts and start the cluster on them")
    up.add_argument("--workers", type=int, default=2, help="worker hosts beside the head")
    up.add_argument("--cpus", type=int, default=2, help="CPUs each Ray node offers")
    add = sub.add_parser("add", help="one more worker host, joined to the running cluster")
    add.add_argument("--cpus", type=int, default=2, help="CPUs its Ray node offers")
    sub.add_parser("down", help="kill every host's processes, remove namespaces and disks")
    run = sub.add_parser("exec", help="run a command on one host: exec HOST -- CMD...")
    run.add_argument("host")
    run.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("error: emulated hosts need root (network and mount namespaces)", file=sys.stderr)
        return 2
    hosts = Hosts()
    if args.action == "down":
        hosts.down()
        return 0
    if args.action == "exec":
        if args.host not in hosts.hosts:
            print(
                f"error: no host {args.host!r} (hosts: {', '.join(hosts.hosts) or 'none: run up'})",
                file=sys.stderr,
            )
            return 2
        argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
        host = hosts.hosts[args.host]
        cwd = Path.cwd() if host.sees_checkout else None  # the client: where the user is
        return hosts.run(args.host, argv, env=token_env(host), cwd=cwd).returncode
    if args.action == "add":
        if HEAD not in hosts.hosts:
            print("error: no cluster to add a host to: run up first", file=sys.stderr)
            return 2
        host = hosts.add_worker()
        join(hosts, host.name, args.cpus)
        print(f"{host.name} {host.address} joined")
        return 0
    hosts.make(args.workers)
    start_cluster(hosts, args.cpus)
    head = hosts.hosts[HEAD]
    print(
        f"hosts: {', '.join(f'{h.name} {h.address}' for h in hosts.hosts.values())}\n"
        f"submit from the client: python -m launch.tools.hosts exec client -- ray job submit "
        f"--address http://{head.address}:{DASHBOARD_PORT} --working-dir . -- "
        "python -m launch.train ...\n"
        "stop: python -m launch.tools.hosts down"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
