"""Kernel side of the recommendation: which devices there are, a probe on an engine, the plan, and its table.

Step times come, in order of trust, from the probe of this very model on the device (the profile-fitted estimate
calibrated to the probe's measurements), from the estimator fitted on shipped profiles of other models, or, for a
device kind nobody profiled, from its published peak throughput. The table says which one each row used.
"""

import html
import os
from dataclasses import dataclass

import numpy as np
from traitlets import Float
from traitlets.config import Configurable

from jupyter_dl.backends import horovod as backend
from jupyter_dl.jobs.listing import INTERCONNECT_PROBE, RECOMMEND_PROBE
from jupyter_dl.recommend.estimator import StepTimeEstimator
from jupyter_dl.recommend.planner import (
    DeviceKind,
    Workload,
    candidates,
    choose,
    spec_devices,
    spec_step_time,
)
from jupyter_dl.recommend.quantities import plan_bytes, plan_duration, plan_energy
from jupyter_dl.wire import remote


@dataclass
class Recommendation:
    chosen: object
    alternatives: list
    headline: str
    workload: Workload
    devices: list

    COLUMNS = ("devices", "batch/rank", "LR", "epoch", "total", "energy", "memory", "basis", "why not")

    def _rows(self, times="x"):
        """(label, cells) of the chosen plan and each alternative, as strings."""
        for label, plan in [("chosen", self.chosen)] + [("", alt) for alt in self.alternatives]:
            yield (
                label,
                (
                    f"{plan.ranks} {times} {plan.kind}",
                    str(plan.batch_size),
                    f"{plan.learning_rate:.3g}" if plan.learning_rate else "-",
                    plan_duration(plan.epoch_s),
                    plan_duration(plan.total_s),
                    plan_energy(plan.energy_j),
                    plan_bytes(plan.memory_bytes),
                    plan.basis,
                    plan.why_not,
                ),
            )

    def as_text(self) -> str:
        rows = [("", *self.COLUMNS[:-1], "")] + [(label, *cells) for label, cells in self._rows()]
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
        return f"[jupyter-dl] recommendation: {self.headline}\n" + "\n".join(lines)

    def as_html(self) -> str:
        head = "".join(f"<th>{h}</th>" for h in ("", *self.COLUMNS))
        body = []
        for label, cells in self._rows(times="×"):
            style = " style='font-weight:bold'" if label else ""
            body.append(f"<tr{style}>" + "".join(f"<td>{html.escape(c)}</td>" for c in (label, *cells)) + "</tr>")
        return (
            f"<div class='jp-dl-recommendation'><b>{html.escape(self.headline)}</b>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>"
        )

    def _repr_html_(self):
        return self.as_html()

    def __repr__(self):
        return self.as_text()


class Advisor(Configurable):
    cpu_power_w = Float(15.0, help="Watts one CPU engine draws while it trains (energy of CPU ranks).").tag(config=True)
    gpu_power_w = Float(300.0, help="Watts per GPU for GPU kinds missing from the shipped device table.").tag(
        config=True
    )
    default_bandwidth_gb_s = Float(
        2.0, help="Allreduce bandwidth (GB/s) assumed between engines when it cannot be measured (one engine)."
    ).tag(config=True)

    def __init__(self, session, **kwargs):
        super().__init__(**kwargs)
        self.session = session
        self._interconnect = None
        self._estimator = None

    # ------------------------------------------------------------------------------------------- devices
    def devices(self):
        """Device kinds available to this notebook, with how many are free: the cluster's engines (or the local
        cluster %%distribute would start), no more than the GPU pool has free now when jobs take GPUs from one."""
        cluster = self.session.cluster
        if cluster.client is not None and cluster.engine_ids():
            kinds = cluster.kinds(cluster.engine_ids())
            counts = {k: kinds.count(k) for k in sorted(set(kinds))}
        else:
            from jupyter_dl.host.gpus import names

            gpus = names()
            counts = {f"gpu:{n}": gpus.count(n) for n in sorted(set(gpus))} or {"cpu": cluster.default_size()}
        pool, _ = self.session.runner.pools.active()
        free = pool.summary()["free"] if pool is not None else None
        if free:  # with none free, a plan of any size waits its turn: the engines still bound the choice
            counts = {kind: min(count, free) for kind, count in counts.items()}
        bandwidth, latency = self.interconnect()
        specs = spec_devices()
        out = []
        for kind, count in counts.items():
            spec = specs.get(kind, {})
            if kind == "cpu":
                power = self.cpu_power_w
                memory = _host_memory() / max(1, count)
            else:
                power = spec.get("power_w", self.gpu_power_w)
                memory = spec.get("memory_gb", 16) * 2**30
            link = spec.get("interconnect_gb_s", bandwidth / 1e9) * 1e9 if kind != "cpu" else bandwidth
            out.append(DeviceKind(kind, count, power, memory, link, latency))
        return out

    def interconnect(self):
        """(bytes/s, s) of an allreduce between two engines, measured once per session; a default with fewer."""
        if self._interconnect is None:
            cluster = self.session.cluster
            if cluster.client is not None and len(cluster.engine_ids()) >= 2:
                from jupyter_dl.kernel.job.work import FunctionWork
                from jupyter_dl.wire.options import RunOptions

                # A second of tensor traffic, not training: it does not wait in the GPU pool's queue.
                options = RunOptions(n=2, manual=True, plot=False, name=INTERCONNECT_PROBE, pooled=False)
                work = FunctionWork(backend.measure_allreduce)
                self._interconnect = self.session.runner.run(work, options).results[0]
            else:
                self._interconnect = (self.default_bandwidth_gb_s * 1e9, 50e-6)
        return self._interconnect

    # ------------------------------------------------------------------------------------------ planning
    def estimator(self):
        if self._estimator is None:
            self._estimator = StepTimeEstimator.shipped()
        return self._estimator

    def step_time_function(self, features, probe=None):
        """step_time(kind, batch) -> (seconds, basis)."""
        estimator = self.estimator()
        calibration = {}
        if probe:
            kind = probe["device"]
            xs = [r["batch_size"] for r in probe["rows"]]
            ys = [r["step_s"] for r in probe["rows"]]
            slope, intercept = np.polyfit(xs, ys, 1) if len(xs) > 1 else (ys[0] / xs[0], 0.0)
            calibration[kind] = (max(slope, 0.0), max(intercept, 0.0))

        def step_time(kind, batch):
            if kind in calibration:
                slope, intercept = calibration[kind]
                return intercept + slope * batch, "measured"
            if kind in estimator.devices():
                return estimator.step_time(features, batch, kind), "profiles"
            return spec_step_time(features, batch, kind), "spec"

        return step_time

    def recommend(self, workload: Workload, deadline_s=None, probe=None) -> Recommendation:
        devices = self.devices()
        plans = candidates(workload, devices, self.step_time_function(workload.features, probe))
        chosen, alternatives, headline = choose(plans, deadline_s)
        return Recommendation(chosen, alternatives, headline, workload, devices)

    def probe_model(self, model, x, y, batch_size):
        """Profile a notebook model on one engine (its own copy) at 1, 2 and 4 times the batch size."""
        from jupyter_dl.kernel.job.work import FunctionWork
        from jupyter_dl.wire.options import RunOptions

        largest = batch_size * 4
        work = FunctionWork(
            remote.PROFILE, (model, x[:largest], y[:largest], [batch_size, batch_size * 2, batch_size * 4])
        )
        options = RunOptions(n=1, manual=True, plot=False, name=RECOMMEND_PROBE)
        return self.session.runner.run(work, options).results[0]


def _host_memory():
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 8 * 2**30
