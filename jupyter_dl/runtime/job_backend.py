"""Engine side: the backend of the job this engine runs (set by rank.run from the job's options), for every module
that needs a collective. Between jobs it stays what the last job used."""

from jupyter_dl.backends import Backend, named

_current: list = []
_calls: dict = {}  # collective kind -> calls so far in this job (jupyter_dl.collectives)


def use(name: str) -> Backend:
    """At the start of each job: its backend, and the count of the user's collective calls from zero."""
    _current[:] = [named(name)]
    _calls.clear()
    return _current[0]


def call_number(kind: str) -> int:
    """The number of this call of `kind` in the job: Horovod matches collectives across ranks by name, so the n-th
    call of each kind must get the same name on every rank (TensorFlow's match by order and ignore it)."""
    _calls[kind] = _calls.get(kind, 0) + 1
    return _calls[kind]


def backend() -> Backend:
    """The running job's backend (Horovod before any job has chosen, as on an engine that has only preloaded)."""
    return _current[0] if _current else named("horovod")
