"""Predict a training step's time and memory from model features, per device kind, fitted on shipped profiles.

Step time on one device is a sum of costs that each grow with one feature:
- a fixed cost per step (the call, the input's conversion, starting the graph),
- a fixed cost per layer of each group (dense, conv, recurrent, attention, other): launching and setting up its
  forward and backward kernels, which differs by kind (a dense layer is a few small kernels; a convolution's kernels
  and the dozens of operations of an attention layer cost far more),
- a cost per operation recurrent loops launch (each time step runs a few dozen small kernels),
- FLOPs per group that computes (dense, conv, recurrent, attention), each at its own rate (a training step does about
  three times the forward FLOPs); the other layers' FLOPs are one per output element, elementwise work their traffic
  already prices (pricing both put the leave-one-model-out error 5.82% rather than 5.76%),
- elements each group reads and writes, and elements the recurrent loops write: memory traffic, which is what small
  layers and elementwise work are bound by; a recurrent layer's traffic is its loops' (traced) elements alone, as its
  per-layer count guesses the same gates again (counting both put simplernn-128 16% off, the loops alone 7%),
- weights per group: every weight's gradient is written and its optimizer slots updated once a step, and a dense,
  convolution or recurrent weight is also read by its matmuls forward and backward, which an embedding table's rows
  are not (with one price for every weight, embedding models were predicted 12% off; with a price per group, 6%).
The coefficients are non-negative and fitted, one set per device kind, to the least sum of absolute relative errors
(a linear programme): the fit minimises the very error the benchmark reports, small and large models count alike,
and one model's odd measurement pulls the coefficients less than under least squares. Scaling to several devices
adds the ring allreduce of the gradients (2(k-1)/k of their bytes over the measured or tabled bandwidth, plus latency
per hop), so scaling is predicted, not assumed.
"""

import json
import math
import pathlib

import numpy as np

from jupyter_dl.wire.model_features import GROUPS, OPS_PER_STEP_GUESS

PROFILES = pathlib.Path(__file__).resolve().parent.parent / "data" / "profiles"
BYTES = 4  # float32
COMPUTING = tuple(g for g in GROUPS if g != "other")  # groups whose FLOPs are priced (see the module docstring)


def terms(features: dict, batch: int) -> np.ndarray:
    # Features taken before FLOPs were counted by group: all at the matmul rate, where most FLOPs of a model are.
    flops = features.get("flops_by_group") or {"dense": features["flops_per_sample"]}
    # Features taken before layers, traffic and loops were counted by group: the nearest rough equivalents.
    layers = features.get("layers_by_group") or {"other": features["layers"]}
    traffic = features.get("traffic_by_group") or {"other": 2 * features["activations_per_sample"]}
    loop_launches = features.get("loop_launches", OPS_PER_STEP_GUESS * features.get("sequential_steps", 0))
    weights = features.get("params_by_group") or {"dense": features["trainable_params"]}
    return np.array(
        [1.0]
        + [layers.get(g, 0) for g in GROUPS]
        + [loop_launches]
        + [3.0 * flops.get(g, 0.0) * batch for g in COMPUTING]
        + [traffic.get(g, 0) * batch for g in GROUPS if g != "rnn"]
        + [features.get("loop_elements", 0) * batch]
        + [weights.get(g, 0) for g in GROUPS]
    )


class StepTimeEstimator:
    def __init__(self):
        self.coefficients = {}  # device kind -> array

    # ---------------------------------------------------------------------------------------------- fitting
    def fit(self, profiles):
        """profiles: [{"device", "models": [{"name", "features", "rows": [{batch_size, step_s}]}]}]"""
        by_device = {}
        for profile in profiles:
            for model in profile["models"]:
                for row in model["rows"]:
                    by_device.setdefault(profile["device"], []).append((model["features"], row))
        for device, samples in by_device.items():
            a = np.array([terms(f, r["batch_size"]) for f, r in samples])
            y = np.array([r["step_s"] for _, r in samples])
            self.coefficients[device] = least_relative_error(a, y)
        return self

    @classmethod
    def shipped(cls):
        """Fitted on every profile under jupyter_dl/data/profiles/."""
        return cls().fit([json.loads(p.read_text()) for p in sorted(PROFILES.glob("*.json"))])

    # ------------------------------------------------------------------------------------------- predicting
    def devices(self):
        return sorted(self.coefficients)

    def step_time(self, features: dict, batch: int, device: str) -> float:
        """Seconds per training step on one device of this kind (no communication)."""
        if device not in self.coefficients:
            raise KeyError(f"no profiles for device {device!r}; collect some with scripts/collect_profiles.py")
        return float(terms(features, batch) @ self.coefficients[device])


def least_relative_error(a: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative c minimising sum |a c - y| / y, as a linear programme: c and one bound u_i per row, u_i >= the
    row's relative error either way, minimise sum u. Columns are scaled to 1 first so the solver sees no 1e-9 terms
    beside 1e9 ones."""
    from scipy.optimize import linprog

    scale = a.max(axis=0)
    scale[scale == 0] = 1.0
    relative = a / scale / y[:, None]
    rows, cols = relative.shape
    each_row = np.eye(rows)
    solution = linprog(
        np.concatenate([np.zeros(cols), np.ones(rows)]),
        A_ub=np.block([[relative, -each_row], [-relative, -each_row]]),
        b_ub=np.concatenate([np.ones(rows), -np.ones(rows)]),
        bounds=(0, None),
        method="highs",
    )
    if not solution.success:
        raise RuntimeError(f"fitting the step-time coefficients failed: {solution.message}")
    return solution.x[:cols] / scale


def allreduce_time(params: int, ranks: int, bandwidth_bytes_s: float, latency_s: float) -> float:
    """Ring allreduce of the gradients across `ranks`: each rank sends and receives 2(k-1)/k of the bytes."""
    if ranks <= 1:
        return 0.0
    return 2.0 * (ranks - 1) / ranks * params * BYTES / bandwidth_bytes_s + 2.0 * (ranks - 1) * latency_s


def memory_bytes(features: dict, batch: int, optimizer_slots: int = 2) -> int:
    """Working memory of a training step: weights, gradients and optimizer slots, plus activations kept for the
    backward pass and their gradients, plus the input batch. An estimate; the probe measures the real peak."""
    params = features["params"] * BYTES * (2 + optimizer_slots)
    activations = features["activations_per_sample"] * batch * BYTES * 2
    return int(params + activations + features["input_size"] * batch * BYTES)


def model_family(features: dict) -> str:
    """The family a model is reported under: the first of recurrent, attention, convolution or embedding layers it
    has, else mlp (a text model with an LSTM counts as rnn)."""
    flops = features.get("flops_by_group") or {}
    for group, family in (("rnn", "rnn"), ("attention", "attention"), ("conv", "cnn")):
        if flops.get(group):
            return family
    return "embedding" if "Embedding" in features.get("kinds", {}) else "mlp"


def family_mape(profile, per_model: dict) -> dict:
    """Per model family, the mean error over its models' rows (per_model: name -> that model's MAPE)."""
    errors: dict = {}
    for model in profile["models"]:
        if model["name"] in per_model:
            family = model_family(model["features"])
            errors.setdefault(family, []).extend([per_model[model["name"]]] * len(model["rows"]))
    return {family: float(np.mean(values)) for family, values in sorted(errors.items())}


def mape(predicted, actual) -> float:
    return float(np.mean([abs(p - a) / a for p, a in zip(predicted, actual)]))


def leave_one_model_out(profiles):
    """For each model: fit on every other model, predict this one's rows. Returns (per-model APEs, overall MAPE)."""
    per_model = {}
    all_pred, all_true = [], []
    for profile in profiles:
        for held in profile["models"]:
            rest = [{**p, "models": [m for m in p["models"] if m is not held]} for p in profiles]
            estimator = StepTimeEstimator().fit(rest)
            pred = [estimator.step_time(held["features"], r["batch_size"], profile["device"]) for r in held["rows"]]
            true = [r["step_s"] for r in held["rows"]]
            per_model[held["name"]] = mape(pred, true)
            all_pred += pred
            all_true += true
    return per_model, mape(all_pred, all_true) if all_true else math.nan
