"""The project's process groups listen on the address they were given and nowhere else, and
hold their port from the moment it is picked (``common/rendezvous.py``): real gloo groups on
CPU, the learner ranks' (``Ranks``) and the collective transport's (learner rank 0 and an
engine worker's side), each member in its own process."""

from __future__ import annotations

import os
import socket
import traceback
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from common.config import ConfigError, load_config
from common.rendezvous import (
    LOOPBACK,
    GroupStore,
    GroupUnreachable,
    hold,
    interface_address,
    interface_of,
    join_interface,
    listen,
    split_address,
    take,
)
from common.types import ProcessGroupSpec
from launch.fleet.preflight import user_error

LISTEN = "0A"  # the state column of /proc/net/tcp


def _decode(hex_address: str) -> tuple[str, int]:
    """An address of ``/proc/net/tcp{,6}`` as (ip, port); IPv6 ones in their short form."""
    ip_hex, port_hex = hex_address.split(":")
    raw = bytes.fromhex(ip_hex)
    # The kernel prints each 32-bit word of the address in host (little-endian) order.
    raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    family = socket.AF_INET if len(raw) == 4 else socket.AF_INET6
    return socket.inet_ntop(family, raw), int(port_hex, 16)


def listening(pid: int | None = None) -> list[tuple[str, int]]:
    """The (ip, port) every listening TCP socket of process ``pid`` (this one) is bound to."""
    fd_dir = f"/proc/{pid or os.getpid()}/fd"
    inodes = set()
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(f"{fd_dir}/{fd}")
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == LISTEN and fields[9] in inodes:
                found.append(_decode(fields[1]))
    return found


def listeners_on_port(port: int) -> list[str]:
    """The addresses any process of this machine listens on at ``port``."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            ip, bound_port = _decode(fields[1])
            if fields[3] == LISTEN and bound_port == port:
                found.append(ip)
    return found


def test_a_group_store_listens_on_its_address_alone():
    store = GroupStore(LOOPBACK)
    host, port = store.address.rsplit(":", 1)
    assert host == LOOPBACK
    assert listeners_on_port(int(port)) == [LOOPBACK]


def test_a_held_address_keeps_its_port_until_the_store_takes_it():
    address = hold(LOOPBACK, "lo")
    port = int(address.rsplit(":", 1)[1])
    for host in (LOOPBACK, "0.0.0.0"):  # nobody else can take the port meanwhile
        with socket.socket() as squatter, pytest.raises(OSError):
            squatter.bind((host, port))
    held = take(address)
    assert held is not None and held.interface == "lo"
    assert held.socket.getsockname() == (LOOPBACK, port)
    assert take(address) is None  # handed over once
    held.socket.close()


def test_a_new_hold_releases_one_never_used():
    stale = hold(LOOPBACK, "")
    fresh = hold(LOOPBACK, "")
    assert take(stale) is None
    take(fresh).socket.close()


def test_interface_names_resolve_and_a_missing_one_is_a_config_error():
    assert interface_address(interface_of(LOOPBACK)) == LOOPBACK
    with pytest.raises(ConfigError, match=r"ray.group_interface: .* no network interface"):
        interface_address("nosuchif0")
    with pytest.raises(ConfigError, match=r"ray.group_interface: 'eth0; x' is not"):
        load_config(None, ["--ray.group_interface", "eth0; x"])


def _learner_rank(rank: int, address: str, interface: str, results) -> None:
    try:
        import torch.distributed as dist

        from learner.sharding import Ranks

        ranks = Ranks(ProcessGroupSpec(address, rank, 2, "gloo", interface), timeout_s=120)
        total = torch.tensor([rank + 1.0])
        dist.all_reduce(total)
        results.put((rank, total.item(), listening(), os.environ.get("GLOO_SOCKET_IFNAME")))
        ranks.close()
    except BaseException:
        traceback.print_exc()
        raise


def test_learner_ranks_meet_and_talk_on_the_given_interface_only():
    """Two ``Ranks`` processes join the store this process serves on loopback; every socket
    either rank listens on (gloo's own included) is on loopback."""
    interface = interface_of(LOOPBACK)
    store = GroupStore(LOOPBACK)
    context = mp.get_context("spawn")
    results = context.SimpleQueue()
    ranks = [
        context.Process(target=_learner_rank, args=(rank, store.address, interface, results))
        for rank in range(2)
    ]
    for process in ranks:
        process.start()
    for process in ranks:
        process.join()
    assert [process.exitcode for process in ranks] == [0, 0]
    reports = sorted(results.get() for _ in ranks)
    assert [total for _, total, _, _ in reports] == [3.0, 3.0]
    for _, _, sockets, gloo_interface in reports:
        assert gloo_interface == interface
        assert sockets and {ip for ip, _ in sockets} == {LOOPBACK}, sockets
    assert listeners_on_port(split_address(store.address)[1]) == [LOOPBACK]


def _engine_worker(address: str, interface: str, results) -> None:
    try:
        from actor.transfer_engine import GlooWorkerInitInfo, receiver_group

        host, port = address.rsplit(":", 1)
        info = GlooWorkerInitInfo(host, int(port), 1, 2, 1 << 20, interface)
        group = receiver_group(info, 1)
        received = torch.zeros(4)
        group.broadcast(received, 0).wait()
        results.put((received.tolist(), listening(), os.environ.get("GLOO_SOCKET_IFNAME")))
    except BaseException:
        traceback.print_exc()
        raise


def test_the_transfer_group_serves_its_held_address_on_the_given_interface_only():
    """Learner rank 0 (this process) picks and holds the address, then serves the store on
    that very socket; an engine worker joins from another process and receives a broadcast;
    neither listens anywhere but on loopback."""
    from learner.collective_sender import sender_group

    before = set(listening())  # whatever this test process listened on already
    interface = interface_of(LOOPBACK)
    address = hold(LOOPBACK, interface)
    host, port = address.rsplit(":", 1)
    context = mp.get_context("spawn")
    results = context.Queue()
    engine = context.Process(target=_engine_worker, args=(address, interface, results))
    engine.start()
    group = sender_group(host, int(port), 2)
    assert take(address) is None  # the store took the held socket
    group.broadcast(torch.arange(4.0), 0).wait()
    own_sockets = sorted(set(listening()) - before)
    received, engine_sockets, engine_interface = results.get(timeout=600)  # a hang: fail
    engine.join()
    assert engine.exitcode == 0
    assert received == [0.0, 1.0, 2.0, 3.0]
    assert engine_interface == interface
    assert (LOOPBACK, int(port)) in own_sockets
    assert {ip for ip, _ in own_sockets + engine_sockets} == {LOOPBACK}
    assert listeners_on_port(int(port)) == [LOOPBACK]


def test_a_member_finds_its_interface_and_reaches_the_store_first():
    store = GroupStore(LOOPBACK)
    assert join_interface(store.address, "") == "lo"  # the route to the store picks it
    assert os.environ["GLOO_SOCKET_IFNAME"] == "lo"
    assert join_interface(store.address, "lo") == "lo"


def test_a_member_that_cannot_reach_the_store_says_where_in_one_line():
    closed = listen(LOOPBACK)
    address = f"{LOOPBACK}:{closed.getsockname()[1]}"
    closed.close()  # nothing listens there now: the connect is refused at once
    with pytest.raises(GroupUnreachable) as refused:
        join_interface(address, "lo", timeout_s=5)
    assert str(refused.value) == (
        f"ray.group_interface: {socket.gethostname()} cannot reach the group's store at "
        f"{address} through interface 'lo' (127.0.0.1) within 5 s (Connection refused); name "
        "the interface of the cluster's network (docs/cluster.md, Networking)"
    )
    with pytest.raises(ConfigError, match="has no network interface 'nope0'"):
        join_interface(address, "nope0")


def test_an_actor_that_died_of_a_user_error_is_one_line_naming_it():
    class Died(Exception):
        error_msg = (
            "The actor died because of an error raised in its creation task, ray::Learner...\n"
            '  File "learner/sharding.py", line 113, in __init__\n'
            "common.rendezvous.GroupUnreachable: ray.group_interface: w1 cannot reach ..."
        )

    assert str(user_error("learner-demo-1", Died())) == (
        "learner-demo-1 could not start: ray.group_interface: w1 cannot reach ..."
    )
    Died.error_msg = Died.error_msg.replace("common.rendezvous.GroupUnreachable", "KeyError")
    assert user_error("learner-demo-1", Died()) is None  # a bug keeps its stack trace
