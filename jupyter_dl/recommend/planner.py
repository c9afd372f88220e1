"""Choose devices, ranks, per-rank batch size and learning rate for a training job: the lowest-energy plan that
meets the deadline, or, when none does, the fastest (and say so). Pure: inputs are numbers, so the choice can be
tested on constructed device tables where the right answer is known."""

import json
import math
import pathlib
from dataclasses import dataclass, field

from jupyter_dl.live.durations import format_duration
from jupyter_dl.recommend.estimator import allreduce_time, memory_bytes
from jupyter_dl.recommend.quantities import plan_duration

DEVICE_TABLE = pathlib.Path(__file__).resolve().parent.parent / "data" / "devices.json"
BATCH_MULTIPLIERS = (1, 2, 4)  # per-rank batch relative to the cell's; larger global batches get a scaled LR
SPEC_EFFICIENCY = 0.35  # share of peak FP32 a Keras step reaches, for device kinds known only by their spec
LAYER_OVERHEAD_S = 30e-6  # per layer and step, for device kinds known only by their spec


@dataclass
class DeviceKind:
    kind: str  # "cpu" or "gpu:<name>"
    free: int  # how many are free now
    power_w: float  # per device, while training
    memory_bytes: float  # per device
    bandwidth_bytes_s: float  # allreduce bandwidth between these devices
    latency_s: float = 50e-6  # per allreduce hop


@dataclass
class Workload:
    features: dict
    samples: int
    epochs: int
    batch_size: int  # per rank, as written in the cell
    learning_rate: float | None = None
    optimizer_slots: int = 2


@dataclass
class Plan:
    kind: str
    ranks: int
    batch_size: int  # per rank
    learning_rate: float | None
    step_s: float
    epoch_s: float
    total_s: float
    energy_j: float
    memory_bytes: int
    fits: bool
    meets_deadline: bool
    basis: str  # "measured", "profiles" or "spec": where the step time came from
    why_not: str = ""
    notes: list = field(default_factory=list)

    @property
    def global_batch(self):
        return self.ranks * self.batch_size


def spec_devices():
    return json.loads(DEVICE_TABLE.read_text())["devices"]


def spec_step_time(features, batch, kind):
    """Step time from the device's published peak FP32 throughput, for kinds without profiles."""
    spec = spec_devices().get(kind)
    if spec is None:
        raise KeyError(f"no profile and no specification for device {kind!r}")
    return (
        3.0 * features["flops_per_sample"] * batch / (spec["fp32_tflops"] * 1e12 * SPEC_EFFICIENCY)
        + features["layers"] * LAYER_OVERHEAD_S
    )


def candidates(workload, devices, step_time):
    """Every plan: each device kind, 1..free ranks, each batch multiplier. step_time(kind, batch) -> (s, basis)."""
    plans = []
    for device in devices:
        for ranks in range(1, device.free + 1):
            for multiplier in BATCH_MULTIPLIERS:
                batch = workload.batch_size * multiplier
                steps = math.ceil(workload.samples / (batch * ranks))
                compute, basis = step_time(device.kind, batch)
                step = compute + allreduce_time(
                    workload.features["trainable_params"], ranks, device.bandwidth_bytes_s, device.latency_s
                )
                epoch = steps * step
                total = epoch * workload.epochs
                memory = memory_bytes(workload.features, batch, workload.optimizer_slots)
                lr = (workload.learning_rate * multiplier * ranks) if workload.learning_rate else None
                plans.append(
                    Plan(
                        device.kind,
                        ranks,
                        batch,
                        lr,
                        step,
                        epoch,
                        total,
                        ranks * device.power_w * total,
                        memory,
                        memory <= device.memory_bytes,
                        True,
                        basis,
                    )
                )
    return plans


def choose(plans, deadline_s=None, alternatives=3):
    """(chosen plan, alternatives with why they lost, headline)."""
    fitting = [p for p in plans if p.fits]
    if not fitting:
        smallest = min(plans, key=lambda p: p.memory_bytes)
        raise ValueError(
            f"no device has room for this model even at batch {smallest.batch_size} "
            f"({smallest.memory_bytes / 2**30:.1f} GiB needed); use a smaller model or batch"
        )
    for p in fitting:
        p.meets_deadline = deadline_s is None or p.total_s <= deadline_s
    meeting = [p for p in fitting if p.meets_deadline]
    if meeting:
        # Energies within 1% are the same in practice (and in floating point): the faster of those wins.
        lowest = min(p.energy_j for p in meeting)
        chosen = min((p for p in meeting if p.energy_j <= lowest * 1.01), key=lambda p: (p.total_s, p.energy_j))
        headline = (
            "lowest energy"
            + (f" within the deadline of {format_duration(deadline_s)}" if deadline_s else "")
            + f": {chosen.ranks} x {chosen.kind}"
        )
    else:
        chosen = min(fitting, key=lambda p: (p.total_s, p.energy_j))
        headline = (
            f"no plan meets the deadline of {format_duration(deadline_s)}; "
            f"the fastest takes {plan_duration(chosen.total_s)}: {chosen.ranks} x {chosen.kind}"
        )
    others = []
    for pick in (
        min(fitting, key=lambda p: p.total_s),  # the fastest
        min((p for p in fitting if p.ranks == max(q.ranks for q in fitting)), key=lambda p: p.total_s),
        min(
            (p for p in fitting if p.batch_size == chosen.batch_size and p.ranks == 1),
            key=lambda p: p.energy_j,
            default=None,
        ),
        min((p for p in meeting if p is not chosen), key=lambda p: p.energy_j, default=None),
    ):
        if pick is not None and pick is not chosen and pick not in others:
            pick.why_not = _why_not(pick, chosen, deadline_s)
            others.append(pick)
    return chosen, others[:alternatives], headline


def _why_not(plan, chosen, deadline_s):
    if not plan.meets_deadline:
        return f"misses the deadline by {plan_duration(plan.total_s - deadline_s)}"
    energy = plan.energy_j / chosen.energy_j if chosen.energy_j else math.inf
    speed = chosen.total_s / plan.total_s if plan.total_s else math.inf
    if energy > 1.0:
        faster = f", {speed:.2f}x as fast" if speed > 1.0 else f", and slower ({plan_duration(plan.total_s)})"
        return f"{energy:.2f}x the energy{faster}"
    return f"slower ({plan_duration(plan.total_s)} against {plan_duration(chosen.total_s)})"
