"""One way to write a metric's value (loss, accuracy, ...) wherever a summary or a comparison shows one.

Four significant digits, trailing zeros kept, so the values of one run line up and compare by eye: an accuracy of
exactly 1 is '1.000' beside '0.9931', not '1'. Very small or very large values go to scientific notation.

    1.0 -> '1.000'    0.99312 -> '0.9931'    0.25 -> '0.2500'    12.5 -> '12.50'    3e-05 -> '3.000e-05'
"""

import math

DIGITS = 4


def format_metric(value) -> str:
    """`value` with DIGITS significant digits (see the module); '-' for None, 'nan'/'inf' as Python writes them."""
    if value is None:
        return "-"
    if isinstance(value, bool) or not isinstance(value, (int, float)) and not hasattr(value, "__float__"):
        return str(value)
    number = float(value)
    if not math.isfinite(number):
        return str(number)
    if number != 0 and not 1e-3 <= abs(number) < 10**DIGITS:
        return f"{number:.{DIGITS - 1}e}"
    return f"{number:#.{DIGITS}g}".rstrip(".")
