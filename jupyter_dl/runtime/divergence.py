"""Engine side: did the ranks end a zero-code job with the same weights?

Data-parallel training keeps every rank's trainable weights identical; ranks that differ at the end trained apart
(an update that bypassed the averaging) and the model that comes back is only rank 0's. A fingerprint per variable
(sum, sum of magnitudes and sum of squares, in float64) is cheap to compute and to gather,
and catches the cases nobody thought of.
"""

import numpy as np

from jupyter_dl.runtime.job_backend import backend

# Ranks whose fingerprints differ by more than this (relative) trained apart. Averaged gradients give bit-identical
# updates on identical devices; the slack covers summation order on other hardware.
RELATIVE_TOLERANCE = 1e-5


def fingerprint(variables) -> np.ndarray:
    """(n_variables, 3) array: each variable's sum, sum of magnitudes and sum of squares."""
    rows = []
    for v in variables:
        values = np.asarray(v.numpy() if hasattr(v, "numpy") else v, dtype=np.float64)
        rows.append((values.sum(), np.abs(values).sum(), np.square(values).sum()))
    return np.asarray(rows, dtype=np.float64).reshape(-1, 3)


def relative_difference(a: np.ndarray, b: np.ndarray) -> float:
    """Largest difference between two fingerprints, relative to the variables' magnitudes (a sum near zero is
    compared against the sum of magnitudes, not against itself)."""
    if a.size == 0:
        return 0.0
    magnitude = np.maximum(np.abs(a[:, 1:2]), 1e-12)
    scale = np.concatenate([magnitude, magnitude, np.maximum(np.abs(a[:, 2:3]), 1e-24)], axis=1)
    return float(np.max(np.abs(a - b) / scale))


def groups_to_check(namespace, updated_variables) -> dict:
    """label -> trainable variables: every Keras model the cell holds by name, and what hooked optimizers updated
    that no named model covers (a function's local model, a custom loop's variables)."""
    from jupyter_dl.wire import payload

    groups: dict = {}
    covered: set = set()
    for name in sorted(namespace or {}):
        value = namespace[name]
        if payload.is_keras_model(value) and value.built:
            variables = list(value.trainable_variables)
            groups[f"model '{name}'"] = variables
            covered.update(id(v) for v in variables)
    rest = [v for v in updated_variables if id(v) not in covered]
    if rest:
        groups["the variables the cell's optimizers updated"] = rest
    return groups


def check(groups: dict, updated_ids: set) -> list:
    """Gather every rank's fingerprints; on rank 0, one dict per group that differs (label, worst rank, relative
    difference, whether a hooked optimizer updated it). Every rank must call it, in the same place."""
    mine = {label: fingerprint(variables) for label, variables in groups.items()}
    trained = {label: any(id(v) in updated_ids for v in variables) for label, variables in groups.items()}
    everyone = backend().allgather_object(mine, name="jdl.fingerprint")
    if backend().rank_and_size()[0] != 0:
        return []
    apart = []
    for label, reference in mine.items():
        worst_rank, worst = None, 0.0
        for rank, theirs in enumerate(everyone[1:], start=1):
            other = theirs.get(label)
            if other is None or other.shape != reference.shape:
                continue
            difference = relative_difference(reference, other)
            if difference > RELATIVE_TOLERANCE and difference > worst:
                worst_rank, worst = rank, difference
        if worst_rank is not None:
            apart.append({"label": label, "rank": worst_rank, "difference": worst, "trained": trained[label]})
    return apart


def warning(apart: list) -> str:
    """The one warning the notebook shows for ranks that trained apart."""
    parts = "; ".join(
        f"{a['label']} differs on rank {a['rank']} (by {a['difference']:.1e} relative to rank 0)" for a in apart
    )
    if all(a["trained"] for a in apart):
        cause = (
            "something changed weights on some ranks only: code that depends on the rank, or an update "
            "outside optimizer.apply/apply_gradients"
        )
    else:
        cause = (
            "weights were updated outside a Keras optimizer (e.g. variable.assign_sub in a custom loop), which "
            "zero-code mode cannot average, or a model was built on each rank without a fixed seed and never "
            "trained; update through optimizer.apply_gradients, or use --manual with Horovod's own API"
        )
    return f"the ranks trained apart: {parts}. The value that came back is rank 0's alone. Most likely cause: {cause}."
