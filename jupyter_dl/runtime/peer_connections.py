"""Engine side: this host's addresses, and cutting this process's TCP connections to a host that went silent.

A host whose link goes down sends nothing, not even a reset: gloo's connections to it stay open and a collective
waiting on one only fails after Horovod's collective timeout (120 s by default). When the kernel has seen the
host's ranks stop beating, the survivors shut down their own ends of those connections, and the collective fails at
once with a closed connection, as it would for a peer that died.
"""

import ipaddress
import os
import socket


def host_addresses() -> list:
    """This host's IP addresses other than loopback: what a peer's connection to this host reads as its remote end."""
    import psutil

    found = []
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family in (socket.AF_INET, socket.AF_INET6):
                ip = address.address.split("%")[0]  # an IPv6 link-local address carries its interface
                if not ipaddress.ip_address(ip).is_loopback:
                    found.append(ip)
    return found


def cut_connections_to(addresses) -> int:
    """Shut down (both ways) this process's TCP connections whose remote end is one of `addresses`; their readers
    and writers see the connection closed. Returns how many were cut."""
    import psutil

    wanted = set(addresses)
    if not wanted:
        return 0
    process = psutil.Process()
    listing = getattr(process, "net_connections", None) or process.connections  # psutil < 6 names it connections
    cut = 0
    for connection in listing(kind="tcp"):
        if not connection.raddr or connection.raddr.ip not in wanted or connection.fd < 0:
            continue
        try:
            duplicate = os.dup(connection.fd)  # shut down through a copy: the owner (gloo) still closes its own
        except OSError:  # closed meanwhile
            continue
        peer = socket.socket(fileno=duplicate)
        try:
            peer.shutdown(socket.SHUT_RDWR)
            cut += 1
        except OSError:
            pass
        finally:
            peer.close()
    return cut
