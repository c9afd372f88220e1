"""Kernel side: what `%dl_cluster status` (and start, connect) report about the cluster in use."""

from dataclasses import dataclass, field


@dataclass
class ClusterStatus:
    """The cluster in use; with no cluster, running is False and every other field keeps its default."""

    running: bool = False
    owned: bool = False  # started here, so stopping it ends it (a connected cluster is only disconnected)
    cluster_id: str | None = None
    profile: str | None = None
    engines: int = 0
    engine_ids: list[int] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    engines_by_host: dict[str, list[int]] = field(default_factory=dict)  # Horovod's local ranks are placed by these
    gpus: list[str] = field(default_factory=list)
    launcher: str | None = None  # how engines started here start; None for a connected cluster
    starting: str = ""  # while the cluster starts in the background (start_on_load): the stage it is in


def of_engines(ids, described, *, owned, cluster_id, profile, launcher) -> ClusterStatus:
    """The status of a running cluster whose live engines are `ids`, `described` by {"hostname", "gpu", ...}."""
    hosts = sorted({info["hostname"] for info in described})
    return ClusterStatus(
        running=True,
        owned=owned,
        cluster_id=cluster_id,
        profile=profile,
        engines=len(ids),
        engine_ids=list(ids),
        hosts=hosts,
        engines_by_host={
            host: [eid for eid, info in zip(ids, described) if info["hostname"] == host] for host in hosts
        },
        gpus=_pinned_gpus(described),
        launcher=launcher,
    )


def _pinned_gpus(described) -> list[str]:
    """What the engines are pinned to, in index order ('2' before '10'); the same index on several hosts once."""
    return sorted({info["gpu"] for info in described if info.get("gpu")}, key=lambda g: (len(g), g))
