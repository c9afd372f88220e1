"""Kernel side: telling a host cut off from this kernel from an engine that died (for the lost-host error)."""

import os
import time


def silent_hosts(client, ids, hosts, timeout=2.0) -> dict:
    """{hostname: [rank, ...]} of the job's hosts where no engine answers a no-op within `timeout` while
    ipyparallel still lists them: a host cut off from this kernel (link down, host frozen). An engine that died
    or was killed is unlisted by its nanny within about a second, so a killed rank does not make its host look
    lost; the controller itself only notices a silent host after its heartbeats fail for ~30 s."""
    listed = set(client.ids) if client is not None else set()
    asked = {eid: client[eid].apply_async(os.getpid) for eid in ids if eid in listed}
    deadline = time.monotonic() + timeout
    for reply in asked.values():
        reply.wait(max(0.0, deadline - time.monotonic()))
    still_listed = set(client.ids) if asked else set()
    silent = {eid for eid, reply in asked.items() if not reply.ready() and eid in still_listed}
    by_host: dict = {}
    for rank, (eid, host) in enumerate(zip(ids, hosts)):
        by_host.setdefault(host, []).append((rank, eid))
    return {
        host: [rank for rank, _ in ranks] for host, ranks in by_host.items() if all(eid in silent for _, eid in ranks)
    }


def counted_ranks(ranks) -> str:
    """'rank 2' or 'ranks 2, 3'."""
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"
