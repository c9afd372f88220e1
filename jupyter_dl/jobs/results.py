"""Kernel side: what a successful cell job produced, kept in its directory of the job store, and given back later.

<job dir>/results/
    models/<name>.keras       each Keras model the cell bound (rank 0's, as it came back), Keras' own format
    custom_objects.pkl        the cell's classes and functions those models need to load (cloudpickle)
    history/<name>.json       each History: per-epoch logs, epochs, params
    cell.py                   the cell's source
    options.json              the %%distribute options it ran with
    environment.json          TensorFlow/Keras/Horovod/Python versions, hosts, devices (from the ranks)

Results go with their job: the store's retention (JobStore.retention_days, max_jobs) removes both together.
"""

import contextlib
import json
import os
import pathlib
import re
import shutil
import tempfile
import warnings
from dataclasses import dataclass, field

import cloudpickle
from traitlets import Bool, Float
from traitlets.config import Configurable

from jupyter_dl.errors import UsageError
from jupyter_dl.jobs.lookup import find_job, visible_records
from jupyter_dl.wire import construction, keras_objects, payload

RESULTS = "results"


class NoResults(UsageError):
    """The job exists but kept nothing to load (it has not succeeded, or it kept no results)."""


class JobResults(Configurable):
    enabled = Bool(
        True,
        help="Keep what a successful cell job produced (models, histories, source, options, "
        "environment) in its job directory, for jupyter_dl.load_job(ID).",
    ).tag(config=True)
    max_model_mb = Float(
        500.0,
        help="Models with more parameters than this many MB of float32 are not kept (a note "
        "says so); their job still keeps everything else.",
    ).tag(config=True)

    def save(self, job_dir, values: dict, source: str, options: dict, environment: dict, namespace=None) -> list:
        """Write the results; returns one-line notes about what was left out."""
        if not self.enabled:
            return []
        # Written aside and renamed into place: a failure half-way leaves no results/ that looks whole.
        final = pathlib.Path(job_dir) / RESULTS
        pathlib.Path(job_dir).mkdir(parents=True, exist_ok=True)
        folder = pathlib.Path(tempfile.mkdtemp(prefix=".results-", dir=job_dir))
        try:
            notes = self._write(folder, values, source, options, environment, namespace)
            os.replace(folder, final)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return notes

    def _write(self, folder, values, source, options, environment, namespace):
        notes, custom = [], {}
        for name, value in values.items():
            if payload.is_keras_model(value):
                megabytes = value.count_params() * 4 / 1e6 if value.built else 0.0
                if megabytes > self.max_model_mb:
                    notes.append(f"model '{name}' ({megabytes:,.0f} MB) not kept: over c.JobResults.max_model_mb")
                    continue
                (folder / "models").mkdir(parents=True, exist_ok=True)
                # Saved the way models travel: a class without get_config is kept by what built it.
                with construction.serialising(), _unbuilt_saved_quietly():
                    value.save(folder / "models" / f"{name}.keras")
                    custom.update(keras_objects.custom_objects_of(value, {**(namespace or {}), **values}))
            elif payload.is_history(value):
                (folder / "history").mkdir(parents=True, exist_ok=True)
                (folder / "history" / f"{name}.json").write_text(
                    json.dumps(
                        {"history": value.history, "epoch": list(value.epoch), "params": dict(value.params or {})},
                        default=_plain,
                    )
                )
        if custom:
            (folder / "custom_objects.pkl").write_bytes(cloudpickle.dumps(custom))
        (folder / "cell.py").write_text(source)
        (folder / "options.json").write_text(json.dumps(options, default=_plain, indent=1))
        (folder / "environment.json").write_text(json.dumps(environment, default=str, indent=1))
        return notes


@contextlib.contextmanager
def _unbuilt_saved_quietly():
    """Keras warns on saving a model that is not built. A trained model can be unbuilt as one process leaves it
    (keras.io's SiameseModel: its train_step calls a part, never the model), and keeping it is our doing, not the
    user's: one process would show no such warning."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="You are saving a model that has not yet been built")
        yield


@dataclass
class SavedJob:
    """A finished job's results: `models` and `histories` by the names the cell bound them to."""

    id: str
    models: dict = field(default_factory=dict)
    histories: dict = field(default_factory=dict)
    source: str = ""
    options: dict = field(default_factory=dict)
    environment: dict = field(default_factory=dict)
    name: str = ""

    def __repr__(self):
        # What a notebook shows for `%dl_jobs load ID`: which job, what it kept; not the cell's whole source.
        kept = [f"models {', '.join(self.models) or 'none'}", f"histories {', '.join(self.histories) or 'none'}"]
        return f"<SavedJob {self.id} ({self.name or 'unnamed'}): {'; '.join(kept)}>"

    @property
    def model(self):
        """The job's model, when it kept exactly one."""
        if len(self.models) != 1:
            raise AttributeError(
                f"job {self.id} kept {len(self.models)} models ({', '.join(self.models) or 'none'})"
                f"; pick one from .models"
            )
        return next(iter(self.models.values()))


def load_job(store, wanted, viewer=None) -> SavedJob:
    """The kept results of the job `wanted` names (an id, a unique id prefix or a job name, as jobs.lookup reads
    them). UnknownJob when it names no job, NoResults when the job kept none, each with a one-line message."""
    record = find_job(store, wanted, viewer)
    job_id, name, state = record["id"], record.get("name") or "", record.get("state")
    if state in ("queued", "starting", "running"):
        raise NoResults(f"job {job_id} ({name}) is still {state}: load it when it has succeeded")
    if state != "succeeded":  # failed, cancelled, lost
        raise NoResults(f"job {job_id} ({name}) {state}: only a succeeded job keeps its models and histories")
    return load(store.job_dir(job_id), job_id, name)


def load(job_dir, job_id, name="") -> SavedJob:
    import keras

    folder = pathlib.Path(job_dir) / RESULTS
    if not folder.is_dir():
        raise NoResults(
            f"job {job_id} kept no results (it ran a function rather than a cell, saving them failed, "
            f"or c.JobResults.enabled was off)"
        )
    saved = SavedJob(
        job_id,
        source=(folder / "cell.py").read_text(),
        options=json.loads((folder / "options.json").read_text()),
        environment=json.loads((folder / "environment.json").read_text()),
        name=name,
    )
    custom_file = folder / "custom_objects.pkl"
    custom = cloudpickle.loads(custom_file.read_bytes()) if custom_file.exists() else {}
    keras_objects.record_constructor_arguments()
    for path in sorted((folder / "models").glob("*.keras")):
        # Our own kernel wrote these: Lambda layers, the cell's own code and construction records are the user's.
        with construction.deserialising(construction.no_names):
            saved.models[path.stem] = keras.saving.load_model(path, custom_objects=custom, safe_mode=False)
    for path in sorted((folder / "history").glob("*.json")):
        saved.histories[path.stem] = json.loads(path.read_text())
    return saved


def model_file_name(store, job_id, model, viewer=None) -> str:
    """What a kept model downloads as: '<job name>-<model>.keras', the name made safe for any file system, with a
    short id when other jobs the viewer sees share the name (re-runs of a named cell)."""
    records = visible_records(store, viewer)
    record = next((r for r in records if r["id"] == job_id), {"id": job_id, "name": ""})
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", record.get("name") or "").strip("-.") or "job"
    if stem == "job" or sum(r.get("name") == record.get("name") for r in records) > 1:
        stem = f"{stem}-{job_id[:6]}"
    return f"{stem}-{model}.keras"


def _plain(value):
    """JSON for what logs and options hold besides plain numbers: arrays (per-class metrics), numpy scalars."""
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)
