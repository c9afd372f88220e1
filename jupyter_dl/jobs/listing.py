"""Which jobs a listing shows: newest first, filtered by name and state, at most a limit of them, without the jobs
jupyter-dl runs for its own measurements unless asked. Pure: records in, a Selection out (`%dl_jobs` draws it)."""

import fnmatch
from dataclasses import dataclass, field

from jupyter_dl.errors import UsageError
from jupyter_dl.jobs.model import STATES

# Jobs jupyter-dl runs itself, named here so the listing knows them: the allreduce measurement and the profile of a
# notebook model behind a recommendation. The cell probe of --recommend says what it is in its options ("probe").
INTERCONNECT_PROBE = "interconnect-probe"
RECOMMEND_PROBE = "recommend-probe"
_PROBE_NAMES = (INTERCONNECT_PROBE, RECOMMEND_PROBE)


def is_probe(record) -> bool:
    """Whether a job record is one of jupyter-dl's own measurements rather than a job the user ran."""
    return bool((record.get("options") or {}).get("probe")) or record.get("name") in _PROBE_NAMES


def parse_states(text) -> set | None:
    """'running,failed' -> {'running', 'failed'}; None for no filter; a one-line error naming the valid states."""
    if not text:
        return None
    wanted = {s.strip() for s in str(text).split(",") if s.strip()}
    unknown = sorted(wanted - set(STATES))
    if unknown:
        raise UsageError(f"unknown job state {', '.join(map(repr, unknown))}; use any of {', '.join(STATES)}")
    return wanted


@dataclass
class Selection:
    records: list = field(default_factory=list)  # the jobs to show, newest first
    more: int = 0  # jobs that matched but are past the limit
    probes_hidden: int = 0  # probe jobs that matched the other filters but were left out


def select(records, name=None, states=None, probes=False, limit=None) -> Selection:
    """`records` (oldest first, as JobStore.records gives them) filtered and cut. `name`: a job name, or a pattern
    with * and ?; `states`: a set from parse_states; `limit`: at most this many (None: all)."""
    matching, probes_hidden = [], 0
    for record in sorted(records, key=lambda r: r.get("created", 0), reverse=True):
        if name is not None and not fnmatch.fnmatchcase(record.get("name") or "", name):
            continue
        if states is not None and record.get("state") not in states:
            continue
        if not probes and is_probe(record):
            probes_hidden += 1
            continue
        matching.append(record)
    shown = matching if limit is None else matching[:limit]
    return Selection(shown, len(matching) - len(shown), probes_hidden)
