"""Where a job's ranks run (which engines, in which order) and getting the values they read onto those engines."""

from jupyter_dl.cluster.size_checks import counted
from jupyter_dl.errors import UsageError
from jupyter_dl.wire import payload, remote


def gpu_key(host, gpu):
    """A GPU as both the pool (which grants (host, gpu) pairs) and the engines (pinned to one) can name it."""
    return host, str(gpu)


def gpu_of(info):
    """The GPU an engine is pinned to (its describe() info), as gpu_key names it."""
    return gpu_key(info["hostname"], info.get("gpu"))


def gpu_keys(granted):
    return {gpu_key(host, gpu) for host, gpu in granted}


def place(cluster, n, granted=None, kind=None):
    """Choose n engines, grouped by host so each host's ranks are contiguous (Horovod's local ranks). With GPUs
    granted by the pool, the engines pinned to exactly those GPUs (engines on CPU clusters are not pinned);
    with a device kind (a recommendation's), only engines of that kind."""
    ids = cluster.engine_ids()
    pairs = list(zip(ids, cluster.describe(ids)))
    if kind:
        kinds = dict(zip(ids, cluster.kinds(ids)))
        pairs = [(eid, info) for eid, info in pairs if kinds[eid] == kind]
        if len(pairs) < n:
            found = ", ".join(f"{list(kinds.values()).count(k)} x {k}" for k in sorted(set(kinds.values())))
            raise UsageError(
                f"the plan runs {counted(n, 'rank')} on {kind}, but the cluster has "
                f"{counted(len(pairs), 'such engine')} ({found}); add engines of that kind or run without --recommend"
            )
    if granted and any(info.get("gpu") for _, info in pairs):
        wanted = gpu_keys(granted)
        pinned = {gpu_of(info) for _, info in pairs}
        pairs = [(eid, info) for eid, info in pairs if gpu_of(info) in wanted]
        if len(pairs) < n:
            raise UsageError(
                f"the pool granted GPUs {sorted(wanted)}, but the cluster's engines are pinned to "
                f"{sorted(pinned)}; start the cluster with one engine per GPU on the pool's hosts"
            )
    order = {}
    for _, info in pairs:
        order.setdefault(info["hostname"], len(order))
    ranked = sorted(pairs, key=lambda pair: order[pair[1]["hostname"]])
    return [eid for eid, _ in ranked[:n]]


def ship(client, ids, shipment):
    """Send each engine the values it lacks; returns the names that travelled."""
    values = shipment.values
    if not values:
        return []
    manifests = client.direct_view(ids).apply_sync(remote.MANIFEST)
    needs = {}  # the names missing -> the engines missing exactly those, so each group gets one send
    for eid, have in zip(ids, manifests):
        missing = tuple(sorted(name for name, (fp, _) in values.items() if fp is None or have.get(name) != fp))
        needs.setdefault(missing, []).append(eid)
    blobs = {}
    for missing, targets in needs.items():
        if not missing:
            continue
        for name in missing:
            if name not in blobs:
                fp, value = values[name]
                blobs[name] = value if fp is None else payload.dumps(name, value)
        fps = {name: values[name][0] for name in missing}
        client.direct_view(targets).apply_sync(remote.RECEIVE, {m: blobs[m] for m in missing}, fps)
    return sorted(blobs)
