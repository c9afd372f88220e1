"""Engine side: can this host reach the kernel, and through which of its network interfaces?

Ranks on several hosts need an address of the kernel's rendezvous server that every host can reach, and each rank
needs the name of its own interface on that route for gloo (`ens5` here, `ib0` there: never a guessed `eth0`). A TCP
connect to the server answers both: the socket's own address names the interface the route leaves through.
"""

import socket
import threading


def interface_of(local_address: str) -> str | None:
    """The name of the interface holding `local_address` on this host."""
    import psutil

    for name, addresses in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == local_address for a in addresses):
            return name
    return None


def probe(candidates, port, timeout=1.0) -> dict:
    """Try every candidate address of the kernel at once; {hostname, reached: {address: interface}}."""
    reached = {}

    def attempt(address):
        try:
            with socket.create_connection((address, port), timeout=timeout) as connection:
                interface = interface_of(connection.getsockname()[0])
            if interface:  # a route gloo cannot bind to by name is no route for it
                reached[address] = interface
        except OSError:
            pass

    threads = [threading.Thread(target=attempt, args=(address,), daemon=True) for address in candidates]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout + 0.5)
    return {"hostname": socket.gethostname(), "reached": dict(reached)}
