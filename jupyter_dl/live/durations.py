"""One way to write a duration, wherever the notebook, the panel or the recommender shows one.

The form is the one `--deadline` reads, so `parse_duration` takes it back: units h, m and s, the smaller ones padded
to two digits, tenths of a second below ten seconds. The live ETA, the `%dl_jobs` table, the line of a cancelled
cell, the run summary, the comparison table and the recommender's plans all write durations through it.

    4.2 -> '4.2s'    42 -> '42s'    95 -> '1m35s'    3700 -> '1h01m40s'    None -> '-'
"""

import math

UNKNOWN = "-"  # no duration (not measured, or an ETA that cannot be estimated)


def format_duration(seconds: float | None) -> str:
    """`seconds` as '4.2s', '42s', '1m35s' or '1h01m40s'; '-' for None, NaN or infinity; negatives count as 0."""
    if seconds is None or not math.isfinite(seconds):
        return UNKNOWN
    seconds = max(0.0, float(seconds))
    if round(seconds, 1) < 10:
        return f"{seconds:.1f}s"
    total = round(seconds)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{secs:02d}s"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
