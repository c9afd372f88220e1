"""How the ranks reach the kernel's Horovod rendezvous server, and which network interface gloo uses on each."""


def route(cluster, ids, port, rendezvous_address="", network_interface="", probe_timeout=10.0):
    """(rendezvous address, gloo interface per rank). Ranks all on this host talk over loopback; ranks elsewhere
    probe which of this host's addresses they reach, and through which of their own interfaces. The two settings
    are JobRunner.rendezvous_address and JobRunner.network_interface (empty: found as described)."""
    n = len(ids)
    if cluster.all_local(ids):
        return rendezvous_address or "127.0.0.1", [network_interface or "lo"] * n
    if port is None:  # no server in the kernel (TensorFlow's collectives): each rank names its own address
        return "", [network_interface] * n
    from jupyter_dl.host import network
    from jupyter_dl.wire import remote

    candidates = [rendezvous_address] if rendezvous_address else network.candidate_addresses()
    view = cluster.client.direct_view(ids)
    probes = view.apply_async(remote.REACH, candidates, port).get(timeout=probe_timeout)
    address, interfaces = network.choose_route(probes, candidates, port)
    return address, [network_interface] * n if network_interface else interfaces
