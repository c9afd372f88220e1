"""An elastic job's heartbeats: the kernel's board counts a host as cut off only when all its running ranks stopped
asking while a rank elsewhere still asks, and a survivor's cut of the connections its backend opened closes them at
once.

Real HTTP (the board's server, urllib like the ranks) and real TCP sockets; only the board's clock is stepped by
hand, so no result depends on how fast this machine is. The whole path on real engines and a real cut link is in
tests/cluster/test_multi_host.py.
"""

import json
import os
import socket
import threading
import urllib.request

import pytest

from jupyter_dl.backends import peer_connections
from jupyter_dl.kernel.job import elastic_board
from jupyter_dl.kernel.job.elastic_board import ElasticBoard

pytestmark = pytest.mark.fast

HOSTS = ["a", "a", "b", "b"]  # ranks 0, 1 on host a; 2, 3 on host b


class SteppedClock:
    def __init__(self):
        self.now = 1000.0

    def monotonic(self):
        return self.now


@pytest.fixture
def board(monkeypatch):
    clock = SteppedClock()
    monkeypatch.setattr(elastic_board, "time", clock)
    board = ElasticBoard("127.0.0.1")
    board.clock = clock
    yield board
    board.stop()


def ask(board, rank=None):
    """A rank's question (its heartbeat); without a rank, rank 0's read of the request at a commit point."""
    query = "" if rank is None else f"?rank={rank}"
    with urllib.request.urlopen(board.url("127.0.0.1") + query, timeout=5) as response:
        return json.loads(response.read())


def test_a_host_whose_ranks_all_stopped_asking_is_silent_while_another_host_asks(board):
    for rank in range(4):
        ask(board, rank)
    assert board.silent_hosts(HOSTS, range(4), timeout=5) == {}
    board.clock.now += 4
    ask(board, 0)
    ask(board, 1)
    ask(board, 3)  # one rank of b still asks: b is not cut off
    board.clock.now += 2
    assert board.silent_hosts(HOSTS, range(4), timeout=5) == {}
    board.clock.now += 4  # rank 2 silent for 10 s, rank 3 for 6 s; a's ranks for 6 s too
    ask(board, 1)
    assert board.silent_hosts(HOSTS, range(4), timeout=5) == {"b": [2, 3]}
    # Ranks that finished (not pending) stop asking without being lost; the rest of their host decides
    assert board.silent_hosts(HOSTS, [0, 1], timeout=5) == {}
    assert board.silent_hosts(HOSTS, [1, 3], timeout=5) == {"b": [3]}


def test_nobody_asking_means_the_kernel_stalled_not_every_host(board):
    for rank in range(4):
        ask(board, rank)
    board.clock.now += 60
    assert board.silent_hosts(HOSTS, range(4), timeout=5) == {}


def test_a_host_whose_ranks_never_asked_is_not_counted_lost(board):
    """Ranks still importing or in the rendezvous have not asked yet: the collectives' own timeout covers them."""
    ask(board, 0)
    ask(board, 1)
    ask(board, 2)
    board.clock.now += 10
    ask(board, 0)
    assert board.silent_hosts(HOSTS, range(4), timeout=5) == {}  # rank 3 never asked
    assert board.silent_hosts(HOSTS, [0, 1, 2], timeout=5) == {"b": [2]}


def test_the_ranks_hear_the_loss(board):
    assert ask(board, 0) == {"change": None, "lost": None}
    board.report_lost("host b (ranks 2, 3) stopped answering")
    assert ask(board, 1) == {"change": None, "lost": "host b (ranks 2, 3) stopped answering"}
    assert ask(board)["lost"] == "host b (ranks 2, 3) stopped answering"  # (rank 0's read: no heartbeat, same word)
    assert 0 in board._beats and None not in board._beats


def test_cutting_the_connections_a_backend_opened_closes_them_at_once_and_leaves_the_others():
    """A reader blocked on a connection opened after the snapshot (as gloo's pairs are inside hvd.init) gets
    end-of-file now, as gloo's reader would; a connection that was open before is untouched."""
    servers = [socket.create_server(("127.0.0.1", 0)) for _ in range(2)]
    to_keep = socket.create_connection(servers[0].getsockname())
    accepted = [servers[0].accept()[0]]
    before = peer_connections.established()
    to_cut = socket.create_connection(servers[1].getsockname())
    accepted.append(servers[1].accept()[0])
    opened = peer_connections.established() - before
    read = {}

    def blocked_reader():
        read["cut"] = to_cut.recv(10)  # blocks: the peer sends nothing, as a silent host's does not

    reader = threading.Thread(target=blocked_reader, daemon=True)
    reader.start()
    try:
        # Both ends of the new connection are in this process: both opened after the snapshot, both cut
        assert len(opened) == 2 and peer_connections.cut(opened) == 2
        reader.join(timeout=10)
        assert not reader.is_alive() and read["cut"] == b""
        accepted[0].sendall(b"still here")
        assert to_keep.recv(10) == b"still here"
    finally:
        for s in [to_cut, to_keep, *servers, *accepted]:
            s.close()


def test_a_connection_closed_between_the_listing_and_the_cut_is_not_mistaken_for_what_took_its_number(monkeypatch):
    """The race the host-loss soak met ('Socket operation on non-socket' in a rank's listener): gloo closed a
    connection after the listing and its number went to a file. It may as well go to another connection, such as the
    engine's own to its controller, which must not be cut. Here the listing is taken, the connection closed, and its
    number given to a file, then to another connection, before the cut."""
    server = socket.create_server(("127.0.0.1", 0))
    gone = socket.create_connection(server.getsockname())
    accepted = [server.accept()[0]]
    before = peer_connections._tcp_connections()  # the listing, with the connection's number in it
    pair = (gone.getsockname(), gone.getpeername())
    number = gone.fileno()
    monkeypatch.setattr(peer_connections, "_tcp_connections", lambda: before)
    other = socket.create_connection(server.getsockname())  # opened first: neither takes the number by itself
    accepted.append(server.accept()[0])
    with open(__file__) as a_file:
        gone.close()
        os.dup2(a_file.fileno(), number)
        try:
            assert peer_connections.cut({pair}) == 0  # a file: skipped, no error
        finally:
            os.close(number)
    os.dup2(other.fileno(), number)
    try:
        assert peer_connections.cut({pair}) == 0  # another connection: left alone
        accepted[1].sendall(b"still here")
        assert other.recv(10) == b"still here"
    finally:
        os.close(number)
        for s in [other, server, *accepted]:
            s.close()
