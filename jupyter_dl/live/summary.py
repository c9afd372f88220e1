"""The run summary shown when a job ends: wall time, throughput, final metrics, scaling efficiency.

Its throughput is the whole fit's average: each rank's samples over its own time in fit (first steps, validation
and epoch ends included), summed over ranks. The live label and the jobs panel show the speed of the last few
seconds instead, which runs higher once the training step is compiled; the text says which is which."""

import hashlib
import html

from jupyter_dl.live.durations import format_duration
from jupyter_dl.live.metric_values import format_metric


def work_key(code_or_fn) -> str:
    """Identifies 'the same cell' across runs, for scaling efficiency against a single-rank run."""
    if isinstance(code_or_fn, str):
        text = code_or_fn
    else:
        text = f"{getattr(code_or_fn, '__module__', '')}.{getattr(code_or_fn, '__qualname__', repr(code_or_fn))}"
    return hashlib.sha1(text.encode()).hexdigest()


def summarize(job, state, baseline_sps=None) -> dict:
    per_rank = state.rank_throughput()
    known = [v for v in per_rank.values() if v]
    total = sum(known) if known and len(known) == len(per_rank) else None
    efficiency = None
    if total and baseline_sps and job.n > 1:
        efficiency = total / (job.n * baseline_sps)
    return {
        "job": job.name,
        "state": job.state,
        "ranks": job.n,
        "wall_s": job.elapsed,
        "samples_per_s": total,
        "samples_per_s_by_rank": per_rank,
        "final_metrics": dict(state.epoch_logs[-1]) if state.epoch_logs else {},
        "scaling_efficiency": efficiency,
        "baseline_samples_per_s": baseline_sps,
        "restarts": len(getattr(job, "restarts", [])),
        "membership": [change["n"] for change in getattr(job, "membership", [])],  # an elastic job's group sizes
        "time_split": state.time_split(),
        "resources": resource_peaks(state.resources),
    }


def resource_peaks(resources: dict) -> dict:
    """{rank: {"cpu_mean", "rss_peak_mb", and where sampled "gpu_util_mean", "gpu_mem_peak_mb"}}."""
    peaks = {}
    for rank, series in sorted(resources.items()):
        row = {}
        for key, name, reduce in (
            ("cpu", "cpu_mean", _mean),
            ("rss_mb", "rss_peak_mb", max),
            ("gpu_util", "gpu_util_mean", _mean),
            ("gpu_mem_mb", "gpu_mem_peak_mb", max),
        ):
            values = [v for v in series.get(key, []) if v is not None]
            if values:
                row[name] = reduce(values)
        peaks[rank] = row
    return peaks


def _mean(values):
    return sum(values) / len(values)


def time_split_text(split: dict, ranks: int) -> str:
    """'where time went: 81% compute, 19% in the gradient allreduce (rank 1 waited most: 27%)'."""
    seconds = sum(part["seconds"] for part in split.values())
    if not seconds or ranks < 2 or len(split) < 2:
        return ""  # one rank: nothing to wait for, and its "allreduce" is a copy
    share = sum(part["allreduce_s"] for part in split.values()) / seconds
    waited_most = max(split, key=lambda rank: split[rank]["share"])
    return (
        f"where time went: {1 - share:.0%} compute, {share:.0%} in the gradient allreduce (waiting for the other "
        f"ranks, then exchanging; rank {waited_most} waited most: {split[waited_most]['share']:.0%})"
    )


def resources_text(peaks: dict) -> str:
    """'resources: rank 0 CPU 180% peak memory 1.2 GB, rank 1 ...' (CPU averaged; 100% = one core)."""
    parts = []
    for rank, row in peaks.items():
        items = []
        if "cpu_mean" in row:
            items.append(f"CPU {row['cpu_mean']:.0f}%")
        if "rss_peak_mb" in row:
            items.append(f"peak memory {_mb(row['rss_peak_mb'])}")
        if "gpu_util_mean" in row:
            items.append(f"GPU {row['gpu_util_mean']:.0f}%")
        if "gpu_mem_peak_mb" in row:
            items.append(f"GPU memory {_mb(row['gpu_mem_peak_mb'])}")
        if items:
            parts.append(f"rank {rank} " + " ".join(items))
    return "resources (CPU averaged, 100% = one core): " + ", ".join(parts) if parts else ""


def _mb(value):
    return f"{value / 1024:.1f} GB" if value >= 1024 else f"{value:.0f} MB"


def _fmt_rate(value):
    return f"{value:,.0f}" if value else "n/a"


def as_text(s: dict) -> str:
    parts = [
        f"{s['job']}: {s['state']} in {format_duration(s['wall_s'])} "
        + (
            f"on {'→'.join(map(str, s['membership']))} ranks (elastic)"
            if len(s.get("membership") or []) > 1
            else f"on {s['ranks']} rank{'s' if s['ranks'] != 1 else ''}"
        )
        + (f" after {s['restarts']} restart{'s' if s['restarts'] != 1 else ''}" if s.get("restarts") else "")
    ]
    if s["samples_per_s"]:
        by_rank = ", ".join(f"rank {r}: {_fmt_rate(v)}" for r, v in s["samples_per_s_by_rank"].items())
        parts.append(
            f"{_fmt_rate(s['samples_per_s'])} samples/s averaged over the whole fit ({by_rank}; the live "
            f"figure was the last few seconds)"
        )
    if s["final_metrics"]:
        parts.append(" ".join(f"{k} {format_metric(v)}" for k, v in s["final_metrics"].items()))
    for extra in (time_split_text(s.get("time_split") or {}, s["ranks"]), resources_text(s.get("resources") or {})):
        if extra:
            parts.append(extra)
    if s["scaling_efficiency"] is not None:
        parts.append(
            f"scaling efficiency {s['scaling_efficiency']:.0%} vs 1 rank "
            f"({_fmt_rate(s['baseline_samples_per_s'])} samples/s)"
        )
    elif s["ranks"] > 1 and s.get("state") == "succeeded":  # a cancelled or failed run measured nothing to compare
        parts.append("scaling efficiency: run the cell with -n 1 once to compare")
    return " | ".join(parts)


def as_html(s: dict) -> str:
    rows = as_text(s).split(" | ")
    items = "".join(f"<li>{html.escape(r)}</li>" for r in rows[1:])
    return f"<div class='jp-dl-summary'><b>{html.escape(rows[0])}</b><ul>{items}</ul></div>"
