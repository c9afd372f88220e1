"""`--lr-scale`: how much a job of N ranks multiplies the learning rate (the ranks apply it; the kernel reads it to
report single-rank units, compare runs and turn an LR-finder suggestion back)."""

import math

SCALE_FACTORS = {"linear": lambda n: float(n), "sqrt": lambda n: math.sqrt(n), "none": lambda n: 1.0}


def lr_scale_factor(mode: str, size: int) -> float:
    return SCALE_FACTORS[mode](size)
