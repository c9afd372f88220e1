"""What a job runs and what it brings back: the work (a cell or a function), what must travel with it, and the
result handed to the notebook. Everything here fails on bad input before any engine is touched."""

import sys
from dataclasses import dataclass, field

from jupyter_dl.errors import ShipError
from jupyter_dl.jobs import Job
from jupyter_dl.kernel import cell as cellmod
from jupyter_dl.wire import datasets, keras_objects, payload
from jupyter_dl.wire.spec import OUT_NAME


@dataclass
class CellWork:
    code: str
    namespace: dict
    first_line: int = 1  # the line number the user sees for the code's first line (2 under %%distribute)


@dataclass
class FunctionWork:
    fn: object
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    all_ranks: bool = False


@dataclass
class RunResult:
    job: Job
    values: dict = field(default_factory=dict)  # cell mode: names bound back into the namespace
    problems: dict = field(default_factory=dict)  # names that could not come back, with why
    results: list = field(default_factory=list)  # function mode: return value per rank (rank 0 only unless all)
    stdout: list = field(default_factory=list)  # per rank, the full text
    state: object = None  # the TrainingState built from streamed metrics
    view: object = None  # the cell's LiveView, when one was shown
    probe: dict | None = None  # probe mode: what rank 0 measured of the cell's fit
    recommendation: object = None  # --recommend: the plan it ran with
    diverged: str | None = None  # zero-code: the warning when ranks ended with different weights
    deleted: list = field(default_factory=list)  # cell mode: names the cell deleted, removed from the namespace


@dataclass
class Shipment:
    """What travels to the engines: the values the cell reads, by name as (fingerprint or None, value or blob)."""

    names_in: list = field(default_factory=list)
    names_out: list = field(default_factory=list)
    values: dict = field(default_factory=dict)
    fn: bytes | None = None  # function mode: the cloudpickled (fn, args, kwargs)
    keras_registrations: dict = field(default_factory=dict)  # name read -> its class's registered Keras name
    deletes: list = field(default_factory=list)  # names the cell deletes: gone from the notebook after it ran


def prepare(work) -> Shipment:
    """Serialise what must travel. Arrays are fingerprinted and serialised only if an engine lacks them."""
    if isinstance(work, FunctionWork):
        try:
            fn_blob = dumps_callable((work.fn, work.args, work.kwargs), work.fn)
        except Exception as exc:
            raise ShipError(getattr(work.fn, "__name__", "fn"), f"{type(exc).__name__}: {exc}") from None
        return Shipment(fn=fn_blob)
    names = cellmod.analyse(work.code, work.first_line)  # SyntaxError surfaces here
    values = {}
    reads = cellmod.shippable_reads(names, work.namespace)
    owners = payload.optimizer_owners(reads, work.namespace)
    known = payload.names_by_id(reads, work.namespace, owners)  # a wrapper model refers to the parts beside it
    for name in reads:
        value = work.namespace[name]
        fp = payload.fingerprint(value)
        if datasets.is_dataset(value) or payload.holds_datasets(value):
            values.update(_dataset_shipment(name, value))
        elif fp is None:
            try:
                # Functions by reference: on the ranks they read the ranks' `model`, which travels beside them.
                blob = payload.dumps_sharing(
                    name, value, work.namespace, owners, known=known, functions_by_reference=True
                )
                values[name] = (None, blob)
            except Exception as exc:
                if name in names.binds:  # the cell binds it itself (`with open(...) as f`): the old value is not needed
                    continue
                raise ShipError(name, payload.why_unsendable(value, exc, advice=False)) from None
        else:
            values[name] = (fp, value)
    return Shipment(
        names_in=sorted(values),
        # The last expression's value comes back under OUT_NAME, for the cell to show as one process does.
        names_out=names.binds + ([OUT_NAME] if names.shows_last else []),
        values=values,
        keras_registrations=keras_objects.registrations({name: work.namespace[name] for name in reads}),
        deletes=names.deletes,
    )


def _dataset_shipment(name, value) -> dict:
    """A notebook's tf.data pipeline (or a dict, list or tuple of them: `datasets["train"]`): its graph, and the
    arrays it was built from as content-hashed values (sent to an engine once, like the notebook's arrays)."""
    shipment: dict = {}

    def graph(dataset):
        return _graph_beside(name, dataset, shipment)

    graphs = graph(value) if datasets.is_dataset(value) else payload.each_dataset(value, graph)
    try:
        shipment[name] = (None, payload.cloudpickle.dumps(graphs))
    except Exception as exc:  # another item beside the datasets that cannot travel
        raise ShipError(name, f"{type(exc).__name__}: {exc}") from None
    return shipment


def _graph_beside(name, dataset, shipment: dict):
    """The dataset's graph; the arrays it was built from go into `shipment`."""
    try:
        graph, arrays = datasets.dumps(dataset)
    except datasets.PipelineError as exc:
        raise ShipError(name, exc.why, exc.advice) from None
    except Exception as exc:  # a pipeline of the notebook's that we failed to read: say what failed, not "ranks"
        raise ShipError(
            name,
            f"its tf.data pipeline could not be read: {type(exc).__name__}: {exc}",
            "build the pipeline inside the %%distribute cell",
        ) from None
    shipment.update((array_name, (payload.fingerprint(array), array)) for array_name, array in arrays.items())
    return graph


def dumps_callable(obj, fn):
    """Pickle `obj` (the function with its arguments), the function by value unless it lives in an installed
    package the engines can import too. Arguments travel with cloudpickle as well: closures and lambdas among them
    would defeat ipyparallel's plain pickle.

    Test modules and scripts are usually not importable on the engines, so reference pickling would fail there.
    """
    import sysconfig

    module = sys.modules.get(getattr(fn, "__module__", None) or "")
    path = getattr(module, "__file__", "") or ""
    installed = any(path.startswith(sysconfig.get_paths()[key]) for key in ("purelib", "platlib", "stdlib"))
    if module is not None and module.__name__ != "__main__" and not installed:
        payload.cloudpickle.register_pickle_by_value(module)
        try:
            return payload.cloudpickle.dumps(obj)
        finally:
            payload.cloudpickle.unregister_pickle_by_value(module)
    return payload.cloudpickle.dumps(obj)
