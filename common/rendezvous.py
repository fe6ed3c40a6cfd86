"""Where the project's own process groups meet: the learner ranks' group (``learner/sharding.py``)
and the ``collective`` transport's group (``learner/collective_sender.py`` and
``actor/transfer_engine.py``, its two ends).

The process that picks a group's address binds a listening socket on the chosen interface's
address at once and hands that very socket to the store (``TCPStore(master_listen_fd=...)``):
nothing listens on other interfaces, and the port is never free between being chosen and being
served. gloo's and NCCL's own sockets go on the same interface (:func:`use_interface`). None of
this traffic is authenticated: docs/network.md says why and what to keep private.
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from torch.distributed import TCPStore

from common.config.base import ConfigError

LOOPBACK = "127.0.0.1"
_SIOCGIFADDR = 0x8915  # Linux ioctl: an interface's IPv4 address


def interface_address(interface: str) -> str:
    """The IPv4 address of network interface ``interface`` on this machine (``ConfigError``
    when there is none: the interface comes from ``ray.group_interface``)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            request = struct.pack("256s", interface.encode()[:15])
            reply = fcntl.ioctl(probe.fileno(), _SIOCGIFADDR, request)
        except OSError:
            names = ", ".join(name for _, name in socket.if_nameindex())
            raise ConfigError(
                f"ray.group_interface: this machine ({socket.gethostname()}) has no network "
                f"interface {interface!r} with an IPv4 address (it has: {names})"
            ) from None
    return socket.inet_ntoa(reply[20:24])


def interface_of(address: str) -> str:
    """The name of the interface that holds IPv4 ``address`` (``lo`` for ``127.0.0.1``)."""
    for _, name in socket.if_nameindex():
        try:
            if interface_address(name) == address:
                return name
        except ValueError:
            continue  # no IPv4 address on that one
    raise ValueError(f"no network interface of {socket.gethostname()} holds {address}")


#: How long a member tries to reach its group's store before it stops the run: a store that is
#: up answers a connect in milliseconds; one that cannot be reached would otherwise hold the
#: group's formation for its whole timeout (half an hour) and then fail without saying where.
REACH_TIMEOUT_S = 10.0


class GroupUnreachable(ConfigError):
    """A member of a process group cannot reach the group's store from its interface."""


def route_interface(host: str) -> tuple[str, str]:
    """The interface, and its address, this machine's routes reach ``host`` through (what a
    member's sockets use when nothing names one)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((host, 9))  # no packet: UDP's connect only picks the route
        source = probe.getsockname()[0]
    return interface_of(source), source


def join_interface(address: str, interface: str, timeout_s: float = REACH_TIMEOUT_S) -> str:
    """The interface a member joins the group at ``address`` through: ``interface``
    (``ray.group_interface``), else the one that routes to the store, which every member so
    picks for itself (interface names differ between machines); checked first to reach the
    store within ``timeout_s``, else :class:`GroupUnreachable` names this host, the interface
    and the address. gloo's and NCCL's sockets then use it (:func:`use_interface`)."""
    host, port = split_address(address)
    # an interface with no address is a ConfigError of its own, naming the ones there are
    name, source = (interface, interface_address(interface)) if interface else route_interface(host)
    try:
        with socket.create_connection((host, port), timeout=timeout_s, source_address=(source, 0)):
            pass
    except OSError as exc:
        through = f"interface {name!r} ({source})"
        raise GroupUnreachable(
            f"ray.group_interface: {socket.gethostname()} cannot reach the group's store at "
            f"{address} through {through} within {timeout_s:.0f} s ({exc.strerror or exc}); "
            "name the interface of the cluster's network (docs/cluster.md, Networking)"
        ) from None
    use_interface(name)
    return name


def use_interface(interface: str) -> None:
    """Make the gloo and NCCL groups this process creates from now on open their sockets on
    ``interface`` (nothing when empty: their own choice, the address the host name resolves
    to). Both read the variables when a group is created."""
    if interface:
        os.environ["GLOO_SOCKET_IFNAME"] = interface
        os.environ["NCCL_SOCKET_IFNAME"] = interface


def listen(host: str, port: int = 0) -> socket.socket:
    """A listening TCP socket bound to ``host`` (an address, never all interfaces) at ``port``
    (0: a free one, picked by the kernel and held from then on)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind((host, port))
        sock.listen()
    except OSError:
        sock.close()
        raise
    return sock


def split_address(address: str) -> tuple[str, int]:
    """``"host:port"`` as ``(host, port)``."""
    host, port = address.rsplit(":", 1)
    return host, int(port)


class GroupStore:
    """A group's ``TCPStore`` server on a socket bound to ``host`` the moment its port is
    picked; every member joins it as a client (:func:`store_client`). Serves as long as this
    object lives: the process that picks the address keeps it for the group's lifetime."""

    def __init__(self, host: str, timeout: timedelta = timedelta(minutes=30)) -> None:
        sock = listen(host)
        port = sock.getsockname()[1]
        self.address = f"{host}:{port}"
        fd = sock.detach()  # the store owns it from here
        try:
            self.store = TCPStore(
                host, port, is_master=True, wait_for_workers=False, master_listen_fd=fd,
                timeout=timeout,
            )  # fmt: skip
        except Exception:
            os.close(fd)
            raise


def store_client(address: str, timeout: timedelta) -> Any:
    """A client of the ``TCPStore`` served at ``address`` (waits up to ``timeout`` for it)."""
    host, port = split_address(address)
    return TCPStore(host, port, is_master=False, timeout=timeout)


@dataclass
class Held:
    """A listening socket picked ahead of its store, and the interface its group uses."""

    socket: socket.socket
    interface: str


_held: dict[str, Held] = {}


def hold(host: str, interface: str) -> str:
    """Bind a listening socket on ``host`` now and keep it in this process until the store
    that will serve it takes it (:func:`take`); its ``host:port``. For a group whose address
    must be known before the call that creates its store (the transfer group: the driver asks
    learner rank 0 for an address, then queues every member's join). Sockets still held from
    an earlier address that was never used are closed: groups are formed one at a time."""
    for stale in list(_held):
        _held.pop(stale).socket.close()
    sock = listen(host)
    address = f"{host}:{sock.getsockname()[1]}"
    _held[address] = Held(sock, interface)
    return address


def take(address: str) -> Held | None:
    """The socket :func:`hold` keeps for ``address`` (handed over: no longer kept), if any."""
    return _held.pop(address, None)
