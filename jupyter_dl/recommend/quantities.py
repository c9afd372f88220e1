"""How the recommendation writes its times, memory and energy: in a unit that fits the value, never a zero that only
rounding made (a small model's epoch takes milliseconds and a few KiB: '0s' and '0 MiB' would say nothing).

    plan_duration: 0.00042 -> '420µs'   0.042 -> '42.0ms'   4.2 -> '4.2s'   95 -> '1m35s' (live.durations above 1 s)
    plan_bytes:    300 -> '300 B'   52_000 -> '50.8 KiB'   3 * 2**20 -> '3.00 MiB'
    plan_energy:   0.05 -> '50.0 mJ'   12 -> '12.0 J'   4_000 -> '4.00 kJ'   7.2e6 -> '2.00 kWh'
"""

import math

from jupyter_dl.live.durations import format_duration


def _three_digits(value: float) -> str:
    """Three significant digits, trailing zeros kept ('2.00', '50.8', '420'); below 1 (only in the smallest unit)
    as many places as three digits need."""
    if value >= 100:
        return f"{value:.0f}"
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}" if value >= 1 else f"{value:.3g}"


def plan_duration(seconds) -> str:
    """A duration: below a second in ms (µs below a millisecond), else as live.durations.format_duration."""
    if seconds is None or not math.isfinite(seconds) or seconds >= 0.9995:  # 0.9996 s is '1.0s', not '1000ms'
        return format_duration(seconds)
    if seconds <= 0:
        return "0s"
    if seconds >= 1e-3:
        return f"{_three_digits(seconds * 1e3)}ms"
    return f"{_three_digits(seconds * 1e6)}µs"


def plan_bytes(count) -> str:
    """A size in B, KiB, MiB, GiB or TiB, three significant digits."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{value:.0f} B" if unit == "B" else f"{_three_digits(value)} {unit}"
        value /= 1024
    return f"{_three_digits(value)} TiB"


def plan_energy(joules) -> str:
    """An energy in mJ, J, kJ or kWh (above 0.1 kWh, the unit of an electricity bill)."""
    joules = float(joules)
    if joules >= 3.6e5:
        return f"{_three_digits(joules / 3.6e6)} kWh"
    if joules >= 1000:
        return f"{_three_digits(joules / 1000)} kJ"
    if joules >= 1 or joules <= 0:
        return f"{_three_digits(joules)} J"
    return f"{_three_digits(joules * 1000)} mJ"
