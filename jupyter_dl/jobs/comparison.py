"""Compare jobs side by side, from the job store alone: each run's loss and metric curves (against steps, epochs and
wall time), and a table of the settings that differ, final metrics, wall time, samples/s and the scaling efficiency
across rank counts of the same cell.

Pure data, no plotting and no IPython: `%dl_compare` / `jupyter_dl.compare` draw it (live/compare_figure.py), and a
server endpoint can hand the same JSON-able dict to the panel. The dict's shape is documented on `compare_jobs`.
(Not `compare.py`: a submodule of that name would replace the `jupyter_dl.compare` function once imported.)
"""

import bisect
import hashlib
import json
import zipfile

from traitlets import Float, Integer
from traitlets.config import Configurable

from jupyter_dl.errors import UsageError
from jupyter_dl.jobs.lookup import UnknownJob, pick, visible_records
from jupyter_dl.jobs.model import Job
from jupyter_dl.jobs.results import RESULTS
from jupyter_dl.live.durations import format_duration
from jupyter_dl.live.loss_figure import BATCH_LOSS  # one name for that curve in the cell, the panel and comparisons
from jupyter_dl.live.metric_values import format_metric

X_AXES = ("step", "epoch", "time")
X_TITLES = {"step": "step (optimizer updates)", "epoch": "epoch", "time": "seconds since training began"}
__all__ = ["UnknownJob", "compare_jobs", "resolve"]  # UnknownJob lives in jobs.lookup; the server catches it here
# Options that change how a run is shown or measured, not what it trains: never "a setting that differs".
_NOT_SETTINGS = {"plot", "stream_metrics", "pooled", "probe", "n"}
_OPTION_NAMES = {"batch_size": "batch size set by --recommend", "device_kind": "device kind"}


class CompareSettings(Configurable):
    max_points = Integer(
        2000,
        help="Most points per curve in a comparison; longer runs are averaged into buckets "
        "(the full series stays in each job's metrics.jsonl).",
    ).tag(config=True)
    smoothing = Float(
        0.9, help="Exponential smoothing of the per-batch loss curve, as in the live view (0: raw per-batch values)."
    ).tag(config=True)


# ------------------------------------------------------------------------------------------------ job ids
def resolve(store, ids, viewer=None) -> list:
    """The job records (job.json dicts) that `ids` name, in order, each as jobs.lookup reads it (a full id, a unique
    id prefix, or a job name: its newest job). `viewer` restricts to that user's jobs; another user's job is reported
    exactly like a missing one."""
    if isinstance(ids, str):
        ids = ids.replace(",", " ").split()
    ids = list(dict.fromkeys(str(i) for i in ids))  # the same id twice compares nothing
    if len(ids) < 2:
        raise UsageError(
            f"give two or more job ids to compare (got {len(ids)}{': ' + ids[0] if ids else ''}); "
            f"%dl_jobs lists the jobs and their ids"
        )
    records = visible_records(store, viewer)
    found = [pick(records, wanted) for wanted in ids]
    twice = [wanted for i, wanted in enumerate(ids) if found[i]["id"] in [r["id"] for r in found[:i]]]
    if twice:
        raise UsageError(
            f"{twice[0]!r} names job {found[ids.index(twice[0])]['id']} a second time; give two or more different jobs"
        )
    return found


# ------------------------------------------------------------------------------------------- one run's data
class RunData:
    """What one job's metrics.jsonl says, replayed by the live view's own TrainingState (per-batch loss recovered
    from Keras' running means and smoothed; a restart drops what its checkpoint had not kept): curves against step,
    epoch and time, final epoch logs, per-rank throughput and fit parameters."""

    def __init__(self, records, smoothing=0.9, max_points=2000):
        from jupyter_dl.live.state import TrainingState

        budget = max(2, max_points - max_points % 2)  # DownsampledSeries halves its buckets: an even budget
        self.state = TrainingState(budget=budget, smoothing=smoothing, latency_window=0)
        self.state.consume(records)
        self.begin = self.state.begin
        self.epoch_logs = self.state.epoch_logs

    def _seconds(self, ts):
        origin = self.state.began_t if self.state.began_t is not None else self.state.first_t
        return [t - origin if origin is not None else 0.0 for t in ts]

    def _epoch_position(self, step):
        """Where a global step lies in epochs (2.5: half way through the third), from the epoch boundaries; an
        epoch not over yet is as long as the fit says, else as the last one, else as far as it got."""
        boundaries = self.state.epoch_boundaries
        i = bisect.bisect_left(boundaries, step)
        start = boundaries[i - 1] if i else 0
        if i < len(boundaries):
            length = boundaries[i] - start
        else:
            last = boundaries[-1] - (boundaries[-2] if len(boundaries) > 1 else 0) if boundaries else None
            length = self.state.steps or last or (self.state.global_step - start)
        return i + (step - start) / length if length else float(i)

    def _curve(self, series):
        steps, ys = series.points()
        return steps, [self._epoch_position(s) for s in steps], self._seconds(series.times()), ys

    def batch_curve(self):
        """(steps, epoch positions, seconds, smoothed loss) of the per-batch loss, at most max_points long."""
        return self._curve(self.state.batch_loss)

    def epoch_curves(self):
        """{metric: (steps, epoch numbers, seconds, values)} of every epoch metric."""
        return {key: self._curve(series) for key, series in self.state.epoch_series.items()}

    @property
    def samples_per_s(self):
        """Samples per second over the whole run, all ranks together (each rank's own training time)."""
        throughput = self.state.throughput.values()
        rates = [r["samples"] / r["seconds"] for r in throughput if r.get("samples") and r.get("seconds")]
        return sum(rates) if rates and len(rates) == len(throughput) else None

    @property
    def has_metrics(self):
        return bool(self.state.global_step or self.state.epoch_logs)


# ------------------------------------------------------------------------------------------ kept results
def cell_source(store, job_id):
    """The cell's source kept with a successful job (jobs/results), or None (failed, function job, not kept)."""
    try:
        return (store.job_dir(job_id) / RESULTS / "cell.py").read_text(encoding="utf-8")
    except OSError:
        return None


def cell_key(source):
    """Which runs are 'the same cell': whitespace at the ends does not make another cell."""
    return hashlib.sha1(source.strip().encode()).hexdigest() if source is not None else None


def optimizer_facts(store, job_id):
    """(optimizer class, learning rate as the cell wrote it) from the kept model's config, without loading Keras.
    The model came back with the learning rate the cell set (the ranks' scaling is undone), so it is the cell's."""
    models = sorted((store.job_dir(job_id) / RESULTS / "models").glob("*.keras"))
    preferred = [m for m in models if m.stem == "model"] or models
    if not preferred:
        return None, None
    try:
        with zipfile.ZipFile(preferred[0]) as archive:
            config = json.loads(archive.read("config.json"))
        optimizer = config["compile_config"]["optimizer"]
    except (OSError, KeyError, TypeError, ValueError, zipfile.BadZipFile):
        return None, None
    if isinstance(optimizer, str):
        return optimizer, None
    rate = (optimizer.get("config") or {}).get("learning_rate")
    if isinstance(rate, dict):  # a schedule: its class and starting rate
        start = (rate.get("config") or {}).get("initial_learning_rate")
        name = rate.get("class_name", "schedule")
        rate = f"{name}({_number(start)})" if start is not None else name
    elif isinstance(rate, (int, float)):
        rate = float(f"{rate:.6g}")  # stored as float32: 0.003 comes back as 0.0030000000261
    return optimizer.get("class_name"), rate


# ---------------------------------------------------------------------------------------------- the table
def _number(value):
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _settings(run, data, store):
    """Every setting one run trained with, as {name: value}; the table keeps those that differ between runs."""
    options = run["options"] or {}
    n = run["n"]
    per_rank = data.begin.get("batch_size")
    optimizer, learning_rate = optimizer_facts(store, run["id"])
    if learning_rate is None and data.epoch_logs and "learning_rate" in data.epoch_logs[0]:
        learning_rate = float(f"{data.epoch_logs[0]['learning_rate']:.6g}")  # logged by LR callbacks
    from jupyter_dl.wire.lr_scale import lr_scale_factor

    lr_scale = options.get("lr_scale") or "linear"
    factor = (1.0 if options.get("manual") else lr_scale_factor(lr_scale, n)) * (options.get("lr_multiplier") or 1.0)
    settings = {
        "cell": run["cell_key"][:8] if run["cell_key"] else None,
        "ranks": n,
        "hosts": len(set(run.get("hosts") or [])) or None,
        "GPUs": ", ".join(map(str, run.get("gpus") or [])) or None,
        "batch size per rank": per_rank,
        "global batch size": per_rank * n if per_rank else None,
        "optimizer": optimizer,
        "learning rate (cell)": learning_rate,
        "learning-rate factor": f"x{factor:.3g} ({'manual' if options.get('manual') else lr_scale})",
        "epochs": data.begin.get("epochs"),
        "steps per epoch": data.begin.get("steps"),
        "samples per epoch per rank": data.begin.get("samples_per_epoch"),
    }
    for key, value in sorted(options.items()):
        if key not in _NOT_SETTINGS and key not in ("lr_scale", "lr_multiplier"):
            settings[_OPTION_NAMES.get(key, key.replace("_", " "))] = list(value) if isinstance(value, tuple) else value
    return settings


def _final_metrics(datas):
    keys = list(dict.fromkeys(k for d in datas for k in (d.epoch_logs[-1] if d.epoch_logs else {})))
    keys = [k for k in keys if k != "learning_rate"]  # a setting (see _settings), not a result
    order = {"loss": 0, "val_loss": 1}
    return sorted(keys, key=lambda k: (order.get(k, 2), k.removeprefix("val_"), k.startswith("val_")))


def _efficiency(runs, datas, store, viewer):
    """Per run: (scaling efficiency, baseline job id, baseline ranks) against the fewest-rank successful run of the
    same cell, among the compared runs, or else the store's newest single-rank run of that cell; None where no run of
    the same cell with fewer ranks measured its throughput."""
    out = [None] * len(runs)
    groups = {}
    for i, run in enumerate(runs):
        if run["cell_key"] and run["state"] == "succeeded" and datas[i].samples_per_s:
            groups.setdefault(run["cell_key"], []).append(i)
    for key, members in groups.items():
        base = min(members, key=lambda i: (runs[i]["n"], -runs[i]["created"]))
        base_n, base_sps, base_id = runs[base]["n"], datas[base].samples_per_s, runs[base]["id"]
        if base_n > 1:
            single = _single_rank_run(store, key, viewer)
            if single is not None:
                base_n, base_sps, base_id = 1, single[1], single[0]
        if not any(runs[i]["n"] > base_n for i in members):
            continue  # one rank count only: nothing scaled
        for i in members:
            if runs[i]["n"] >= base_n:
                out[i] = (datas[i].samples_per_s / (runs[i]["n"] / base_n * base_sps), base_id, base_n)
    return out


def _single_rank_run(store, key, viewer):
    """(id, samples/s) of the newest successful single-rank run of the cell with this key, or None."""
    for record in reversed(store.records()):
        if record.get("n") != 1 or record.get("state") != "succeeded":
            continue
        if viewer is not None and record.get("user") != viewer:
            continue
        if cell_key(cell_source(store, record["id"])) == key:
            sps = RunData(store.metrics(record["id"])[0]).samples_per_s
            if sps:
                return record["id"], sps
    return None


def _labels(runs):
    """'name · N ranks' per run; the id is added where that alone would not tell two runs apart."""
    labels = [f"{r['name']} · {r['n']} rank{'s' if r['n'] != 1 else ''}" for r in runs]
    return [f"{label} ({r['id'][:6]})" if labels.count(label) > 1 else label for label, r in zip(labels, runs)]


def _row(section, name, values, text):
    return {"section": section, "name": name, "values": values, "text": text}


def _table(runs, datas, store, viewer):
    rows = []
    settings = [_settings(run, data, store) for run, data in zip(runs, datas)]
    for name in dict.fromkeys(k for s in settings for k in s):
        values = [s.get(name) for s in settings]
        if any(v != values[0] for v in values):
            rows.append(_row("settings", name, values, [_number(v) for v in values]))
    for key in _final_metrics(datas):
        values = [d.epoch_logs[-1].get(key) if d.epoch_logs else None for d in datas]
        rows.append(_row("final metrics", key, values, [format_metric(v) for v in values]))
    walls = [run.get("elapsed") for run in runs]
    rows.append(_row("performance", "state", [r["state"] for r in runs], [r["state"] for r in runs]))
    rows.append(_row("performance", "wall time", walls, [format_duration(w) for w in walls]))
    rates = [d.samples_per_s for d in datas]
    rows.append(_row("performance", "samples/s", rates, [f"{r:,.0f}" if r else "-" for r in rates]))
    scaled = _efficiency(runs, datas, store, viewer)
    rows.append(
        _row(
            "performance",
            "scaling efficiency",
            [s[0] if s else None for s in scaled],
            [_efficiency_text(s, run) for s, run in zip(scaled, runs)],
        )
    )
    restarts = [len(run.get("restarts") or []) for run in runs]
    if any(restarts):
        rows.append(_row("performance", "restarts", restarts, [str(r) for r in restarts]))
    return rows


def _efficiency_text(scaled, run):
    if scaled is None:
        return "-"
    value, base_id, base_n = scaled
    if base_id == run["id"]:
        return f"baseline ({base_n} rank{'s' if base_n != 1 else ''})"
    return f"{value:.0%} vs {base_n} rank{'s' if base_n != 1 else ''}"


# --------------------------------------------------------------------------------------------- comparison
def compare_jobs(store, ids, x="step", viewer=None, settings=None) -> dict:
    """The comparison of the jobs `ids` name (see `resolve`), as a JSON-able dict:

        {"x": "step" | "epoch" | "time",               # the axis asked for; every curve carries all three
         "x_titles": {"step": ..., "epoch": ..., "time": ...},
         "runs": [{"id", "name", "label", "state", "ranks", "cell": key or None, "elapsed"}],   # in the order asked
         "curves": [{"run": id, "metric": "loss (batch, smoothed)" | "loss" | "val_loss" | "accuracy" | ...,
                     "kind": "batch" | "epoch", "step": [...], "epoch": [...], "time": [...], "y": [...]}],
         "table": [{"section": "settings" | "final metrics" | "performance", "name": str,
                    "values": [one raw value per run], "text": [one display string per run]}]}

    "settings" rows are only those that differ between the runs. Raises UsageError (UnknownJob for an id that
    names no job) with a one-line message."""
    settings = settings or CompareSettings()
    if x not in X_AXES:
        raise UsageError(f"x must be one of {', '.join(X_AXES)} (got {x!r})")
    runs = [dict(r) for r in resolve(store, ids, viewer)]
    datas = []
    for run in runs:
        if "elapsed" not in run or run["state"] not in ("succeeded", "failed", "cancelled", "lost"):
            run["elapsed"] = Job.from_dict(run).elapsed
        run["cell_key"] = cell_key(cell_source(store, run["id"]))
        data = RunData(store.metrics(run["id"])[0], settings.smoothing, settings.max_points)
        if not data.has_metrics:
            raise UsageError(
                f"job {run['id']} ({run['name']}, {run['state']}) recorded no training metrics "
                f"(it ended before model.fit, or a --manual cell without jupyter_dl.LiveMetrics()); "
                f"leave it out of the comparison"
            )
        datas.append(data)
    curves = []
    for run, data in zip(runs, datas):
        series = [(BATCH_LOSS, "batch", data.batch_curve())]
        series += [(key, "epoch", curve) for key, curve in data.epoch_curves().items() if key != "learning_rate"]
        for metric, kind, (step, epoch, seconds, y) in series:
            if y:
                curves.append(
                    {
                        "run": run["id"],
                        "metric": metric,
                        "kind": kind,
                        "step": step,
                        "epoch": epoch,
                        "time": seconds,
                        "y": y,
                    }
                )
    return {
        "x": x,
        "x_titles": dict(X_TITLES),
        "runs": [
            {
                "id": r["id"],
                "name": r["name"],
                "label": label,
                "state": r["state"],
                "ranks": r["n"],
                "cell": r["cell_key"],
                "elapsed": r["elapsed"],
            }
            for r, label in zip(runs, _labels(runs))
        ],
        "curves": curves,
        "table": _table(runs, datas, store, viewer),
    }
