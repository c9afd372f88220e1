"""The run summary shown when a job ends: wall time, throughput, final metrics, scaling efficiency.

Its throughput is the whole fit's average: each rank's samples over its own time in fit (first steps, validation
and epoch ends included), summed over ranks. The live label and the jobs panel show the speed of the last few
seconds instead, which runs higher once the training step is compiled; the text says which is which."""
import hashlib
import html


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
    return {"job": job.name, "state": job.state, "ranks": job.n, "wall_s": job.elapsed,
            "samples_per_s": total, "samples_per_s_by_rank": per_rank,
            "final_metrics": dict(state.epoch_logs[-1]) if state.epoch_logs else {},
            "scaling_efficiency": efficiency, "baseline_samples_per_s": baseline_sps,
            "restarts": len(getattr(job, "restarts", []))}


def _fmt_rate(value):
    return f"{value:,.0f}" if value else "n/a"


def as_text(s: dict) -> str:
    parts = [f"{s['job']}: {s['state']} in {s['wall_s']:.1f} s on {s['ranks']} rank{'s' if s['ranks'] != 1 else ''}"
             + (f" after {s['restarts']} restart{'s' if s['restarts'] != 1 else ''}" if s.get("restarts") else "")]
    if s["samples_per_s"]:
        by_rank = ", ".join(f"rank {r}: {_fmt_rate(v)}" for r, v in s["samples_per_s_by_rank"].items())
        parts.append(f"{_fmt_rate(s['samples_per_s'])} samples/s averaged over the whole fit ({by_rank}; the live "
                     f"figure was the last few seconds)")
    if s["final_metrics"]:
        parts.append(" ".join(f"{k} {v:.4g}" for k, v in s["final_metrics"].items()))
    if s["scaling_efficiency"] is not None:
        parts.append(f"scaling efficiency {s['scaling_efficiency']:.0%} vs 1 rank "
                     f"({_fmt_rate(s['baseline_samples_per_s'])} samples/s)")
    elif s["ranks"] > 1 and s.get("state") == "succeeded":  # a cancelled or failed run measured nothing to compare
        parts.append("scaling efficiency: run the cell with -n 1 once to compare")
    return " | ".join(parts)


def as_html(s: dict) -> str:
    rows = as_text(s).split(" | ")
    items = "".join(f"<li>{html.escape(r)}</li>" for r in rows[1:])
    return f"<div class='jp-dl-summary'><b>{html.escape(rows[0])}</b><ul>{items}</ul></div>"
