"""Kernel side: what the kernel knows of each engine of the cluster in use, each fact asked once per engine, and
which engines are gone (killed here, or died): ipyparallel may list those until it notices."""

from jupyter_dl.wire import remote


class KnownEngines:
    def __init__(self):
        self.info = {}  # engine id -> {"hostname", "pid", "gpu"; "kind" once asked}
        self.dead = set()  # engine ids known gone

    def live(self, ids) -> list:
        """`ids` (what ipyparallel lists) without the engines known gone, in order."""
        return [i for i in sorted(ids) if i not in self.dead]

    def describe(self, client, ids, owner, niceness=0) -> list:
        """Hostname, pid and GPU of each engine. `owner`, (pid, host) or None, is the process the engines must
        end with, and `niceness` the priority those on its host take (remote.DESCRIBE arranges both)."""
        missing = [i for i in ids if i not in self.info]
        if missing:
            described = client.direct_view(missing).apply_sync(remote.DESCRIBE, owner, niceness)
            self.info.update(zip(missing, described))
        return [self.info[i] for i in ids]

    def kinds(self, client, ids) -> list:
        """Device kind of each described engine ('cpu' or 'gpu:<name>', what the recommender plans with)."""
        missing = [i for i in ids if "kind" not in self.info[i]]
        if missing:
            for eid, kind in zip(missing, client[missing].apply_sync(remote.DEVICE_KIND)):
                self.info[eid]["kind"] = kind
        return [self.info[i]["kind"] for i in ids]

    def forget(self, ids) -> list:
        """Mark engines dead and drop what was known of them. Returns, for each one not already dead, the GPU it
        was pinned to (None where unknown)."""
        ids = [i for i in ids if i not in self.dead]
        lost_gpus = [self.info.get(i, {}).get("gpu") for i in ids]
        self.dead.update(ids)
        for i in ids:
            self.info.pop(i, None)
        return lost_gpus

    def held_gpus(self) -> set[int]:
        """The GPUs live engines said they are pinned to."""
        return {int(info["gpu"]) for info in self.info.values() if info.get("gpu")}
