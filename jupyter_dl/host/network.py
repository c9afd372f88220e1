"""Kernel side: the route between the kernel and ranks on other hosts, found the way horovodrun finds it (by what the
hosts can actually reach), with `c.JobRunner.rendezvous_address` / `network_interface` as overrides."""

import socket

from jupyter_dl.errors import UsageError


def candidate_addresses() -> list:
    """This host's IPv4 addresses the ranks might reach it on: those of interfaces that are up, loopback last (it only
    serves ranks on this host)."""
    import psutil

    stats = psutil.net_if_stats()
    found = []
    for name, addresses in psutil.net_if_addrs().items():
        if name in stats and not stats[name].isup:
            continue
        for address in addresses:
            if address.family == socket.AF_INET and address.address not in found:
                found.append(address.address)
    return sorted(found, key=lambda a: a.startswith("127."))


def choose_route(probes, candidates, port):
    """(address, interface per rank) from each rank's probe (runtime.reach.probe, in rank order): the first candidate
    every rank reached. A rank whose host reached none is named in a one-line error."""
    for rank, found in enumerate(probes):
        if not found["reached"]:
            raise UsageError(
                f"host {found['hostname']} (rank {rank}) cannot reach this kernel's rendezvous server "
                f"on port {port} at {', '.join(candidates)}; connect the hosts on one network, or set "
                f"c.JobRunner.rendezvous_address to an address of this host that they can reach"
            )
    for address in candidates:
        if all(address in found["reached"] for found in probes):
            return address, [found["reached"][address] for found in probes]
    reachable = "; ".join(f"{f['hostname']}: {', '.join(f['reached'])}" for f in probes)
    raise UsageError(
        f"no address of this host is reachable from every rank's host ({reachable}); set "
        f"c.JobRunner.rendezvous_address to one they all reach"
    )


def ssh_target(host: str) -> str:
    """The host name or address in an SSH launcher's host key ('user@node3:2222' -> 'node3')."""
    host = host.rsplit("@", 1)[-1]
    if host.startswith("["):  # [v6 address]:port
        return host[1:].split("]", 1)[0]
    return host.split(":", 1)[0] if host.count(":") == 1 else host


def address_toward(hosts) -> str:
    """This host's address on its route to the first of `hosts` it has a route to (the kernel's side of the network
    the hosts share). No packet is sent: connecting a UDP socket only picks the route."""
    tried = []
    for host in hosts:
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
                udp.connect((host, 9))
                return udp.getsockname()[0]
        except OSError as exc:
            tried.append(f"{host} ({exc.strerror or exc})")
    raise UsageError(
        f"no route from this host to {', '.join(tried)}; check the host list "
        f"(c.SSHEngineSetLauncher.engines), or set c.Cluster.controller_ip to an address they reach"
    )
