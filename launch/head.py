"""``python -m launch.head start|stop``: a Ray head node with the dashboard and token
authentication, for ``ray job submit`` on one machine or as a cluster's head.

Authentication is always on. Ray 2.60's ``ray start --head`` turns it on only when
``RAY_AUTH_MODE=token`` is set or a token file already exists; on a fresh machine it warns and
runs open, and an open head accepts any job, that is, runs anyone's code. So ``start`` creates
the token when there is none (a random 256-bit hex string in a file only its owner may read,
mode 0600) and starts the head with ``RAY_AUTH_MODE=token``. The token file is Ray's:
``RAY_AUTH_TOKEN_PATH`` when set, else ``~/.ray/auth_token``; every client (``ray job submit``,
a worker's ``ray start``) needs ``RAY_AUTH_MODE=token`` and that token.

The head is started from this interpreter's environment on purpose: a job's entrypoint
inherits the environment of the ``ray start`` that launched the head, so a head started
elsewhere fails the job with "No module named ...".
"""

from __future__ import annotations

import argparse
import os
import secrets
import stat
import subprocess
import sys
from pathlib import Path

from common.help_format import DefaultsHelpFormatter

#: The environment variable Ray reads for the authentication mode, and the one naming a token
#: file in place of ``~/.ray/auth_token`` (``ray/_private/authentication/``, Ray's C++ loader).
AUTH_MODE_VAR = "RAY_AUTH_MODE"
TOKEN_PATH_VAR = "RAY_AUTH_TOKEN_PATH"


def ray_cli() -> str:
    """The ``ray`` executable next to this interpreter."""
    return str(Path(sys.executable).with_name("ray"))


def head_env() -> dict[str, str]:
    """This process's environment with this interpreter's ``bin`` first on ``PATH``."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("HF_HUB_OFFLINE", "1")
    return env


def token_path(env: dict[str, str] | None = None) -> Path:
    """Where Ray looks for the token: ``RAY_AUTH_TOKEN_PATH``, else ``~/.ray/auth_token``."""
    env = os.environ if env is None else env
    if env.get(TOKEN_PATH_VAR):
        return Path(env[TOKEN_PATH_VAR]).expanduser()
    home = env.get("HOME") or str(Path.home())
    return Path(home) / ".ray" / "auth_token"


def ensure_token(path: Path) -> bool:
    """Create the token file at ``path`` (mode 0600, its directory 0700 when made here) unless
    it holds one already; True when it was created.

    Created with ``O_EXCL`` and the final mode at once, so the token is never readable by
    others, not even between a write and a chmod (``ray get-auth-token --generate`` writes it
    with the umask's mode, usually 0644).
    """
    if path.is_file() and path.read_text().strip():
        return False
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.unlink(missing_ok=True)  # an empty file: Ray would refuse to start with it
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as token_file:
        token_file.write(secrets.token_hex(32))  # Ray's own generator: 256 bits
    return True


def authenticated_env(path: Path) -> dict[str, str]:
    """:func:`head_env` with token authentication on, pointing at the token file."""
    return {**head_env(), AUTH_MODE_VAR: "token", TOKEN_PATH_VAR: str(path)}


def start(args: argparse.Namespace, ray_args: list[str]) -> int:
    """``ray start --head`` with token authentication; prints how clients use the token.
    Returns ``ray start``'s exit status."""
    if os.environ.get(AUTH_MODE_VAR, "token") != "token":
        return _refuse(
            f"{AUTH_MODE_VAR}={os.environ[AUTH_MODE_VAR]}: launch.head starts a head with token "
            "authentication only (an open head runs anyone's jobs)"
        )
    if os.environ.get("RAY_AUTH_TOKEN"):
        return _refuse(
            "RAY_AUTH_TOKEN is set: Ray would take the token from it, not from the token file "
            "this command manages; unset it"
        )
    path = token_path()
    created = ensure_token(path)
    if path.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        print(
            f"warning: other users may read {path}, and whoever reads it can run code on the "
            f"cluster (chmod 600 {path})",
            file=sys.stderr,
        )
    command = [
        ray_cli(), "start", "--head",
        f"--port={args.port}",
        "--include-dashboard=true",
        f"--dashboard-host={args.dashboard_host}",
        f"--dashboard-port={args.dashboard_port}",
        f"--metrics-export-port={args.metrics_port}",
        "--disable-usage-stats",
    ]  # fmt: skip
    if args.num_cpus:
        command.append(f"--num-cpus={args.num_cpus}")
    if args.temp_dir:
        command.append(f"--temp-dir={args.temp_dir}")
    started = subprocess.run(command + ray_args, env=authenticated_env(path))
    if started.returncode:
        print("error: `ray start --head` failed (its message is above)", file=sys.stderr)
        return started.returncode
    host = "127.0.0.1" if args.dashboard_host == "127.0.0.1" else "HEAD_IP"
    print(
        f"\nRay head started with token authentication; the token is in {path} "
        f"({'created now' if created else 'already there'}; keep it private: it lets its "
        "holder run any code on the cluster).\n"
        f"Dashboard: http://{host}:{args.dashboard_port}  "
        f"Prometheus metrics: http://127.0.0.1:{args.metrics_port}/metrics\n"
        "Submit a job (any client needs RAY_AUTH_MODE=token and this token, in "
        f"~/.ray/auth_token or named by {TOKEN_PATH_VAR}):\n"
        f"  {AUTH_MODE_VAR}=token {TOKEN_PATH_VAR}={path} {ray_cli()} job submit "
        f"--address http://{host}:{args.dashboard_port} --working-dir . -- "
        "python -m launch.train --config configs/demo.toml --overwrite\n"
        "Join a worker node (copy the token there first, mode 0600):\n"
        f"  {AUTH_MODE_VAR}=token {TOKEN_PATH_VAR}=<token file> ray start "
        f"--address HEAD_IP:{args.port}"
    )
    return 0


def _refuse(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        formatter_class=DefaultsHelpFormatter,
        prog="python -m launch.head",
        description=__doc__,
        epilog="Arguments after -- go to `ray start` unchanged (other ports, for example).",
    )
    parser.add_argument("action", choices=["start", "stop"])
    parser.add_argument("--port", type=int, default=6379)
    parser.add_argument("--dashboard-port", type=int, default=8265)
    parser.add_argument(
        "--dashboard-host",
        default="127.0.0.1",
        help="where the dashboard (and its job API) listens; 0.0.0.0 for a cluster's head, "
        "whose clients are on other machines (safe only because the token is required)",
    )
    parser.add_argument("--metrics-port", type=int, default=8080)
    parser.add_argument(
        "--num-cpus", type=int, default=None, help="default: what Ray counts on this machine"
    )
    parser.add_argument(
        "--temp-dir", default=None, help="Ray's session directory root; default: Ray's own"
    )
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])
    if args.action == "stop":
        return subprocess.run([ray_cli(), "stop"], env=head_env()).returncode
    return start(args, argv[split + 1 :])


if __name__ == "__main__":
    sys.exit(main())
