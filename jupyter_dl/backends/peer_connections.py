"""Engine side of a backend: the TCP connections it opened to its peers, and cutting them to end every wait on a peer.

A host whose link goes down sends nothing, not even a reset: gloo's connections to it stay open, and a collective
waiting on one fails only after Horovod's collective timeout (120 s by default). Nor does a rank that left after an
error close its connections (Horovod keeps them after its background loop ends), so a peer waiting on that rank
waits as long. When the kernel says a peer was lost, every survivor shuts down its own ends of the connections its
backend opened: whatever it waits on fails at once with a closed connection, as for a peer that died, and it leaves
with its commits.
"""

import os
import socket


def _tcp_connections() -> list:
    import psutil

    process = psutil.Process()
    listing = getattr(process, "net_connections", None) or process.connections  # psutil < 6 names it connections
    return listing(kind="tcp")


def established() -> set:
    """This process's established TCP connections, as (local, remote) address pairs."""
    import psutil

    return {(c.laddr, c.raddr) for c in _tcp_connections() if c.raddr and c.status == psutil.CONN_ESTABLISHED}


def cut(connections) -> int:
    """Shut down (both ways) those of `connections` ((local, remote) pairs) still open in this process: their readers
    and writers see the connection closed. Returns how many were cut."""
    wanted = set(connections)
    if not wanted:
        return 0
    done = 0
    for connection in _tcp_connections():
        pair = (connection.laddr, connection.raddr)
        if pair not in wanted or connection.fd < 0:
            continue
        # Shut down through a copy: the owner (gloo) still closes its own. Between the listing and the copy the owner
        # may have closed it and its number gone to a file or to another connection (the engine's own to its
        # controller): only the connection itself is cut.
        peer = _socket_of(connection.fd)
        if peer is None:
            continue
        try:
            if _addresses(peer) == pair:
                peer.shutdown(socket.SHUT_RDWR)
                done += 1
        except OSError:  # no longer connected
            pass
        finally:
            peer.close()
    return done


def _socket_of(fd: int):
    """A socket on a copy of `fd`, or None when the number is closed or no longer a socket."""
    try:
        duplicate = os.dup(fd)
    except OSError:
        return None
    try:
        return socket.socket(fileno=duplicate)
    except OSError:
        os.close(duplicate)
        return None


def _addresses(peer: socket.socket) -> tuple:
    """(local, remote) as psutil lists them: (ip, port) each."""
    return tuple(peer.getsockname()[:2]), tuple(peer.getpeername()[:2])
