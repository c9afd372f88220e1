"""Which job a user means: one resolver for every command that takes a job (`load_job`, `%dl_jobs load|cancel|logs`,
`%dl_compare`), so each accepts the same words and refuses them with the same line.

A job is named by its full id, a unique prefix of its id (at least MIN_PREFIX characters), or its name (the newest
job of that name: re-running a named cell makes the latest run the one meant). Another user's job is reported exactly
like a missing one.
"""

from jupyter_dl.errors import UsageError

MIN_PREFIX = 4  # shorter prefixes name too many jobs to be meant


class UnknownJob(UsageError):
    """A word that names no job this user can see (a server maps it to 404)."""


class AmbiguousJob(UnknownJob):
    """An id prefix shared by several jobs; the message lists them."""


def visible_records(store, viewer=None) -> list:
    """The job records (job.json dicts) `viewer` may see, oldest first; every record when viewer is None."""
    return [r for r in store.records() if viewer is None or r.get("user") == viewer]


def find_job(store, wanted, viewer=None, min_prefix=MIN_PREFIX, records=None) -> dict:
    """The record of the job `wanted` names: a full id, a unique id prefix, or a job name (the newest job of that
    name). Raises UnknownJob (AmbiguousJob for a prefix several ids share) with a one-line message."""
    if records is None:
        records = visible_records(store, viewer)
    return pick(records, str(wanted).strip(), min_prefix)


def pick(records, wanted, min_prefix=MIN_PREFIX) -> dict:
    """find_job over records already read (oldest first): what `%dl_compare` uses for each of its ids."""
    if not wanted:
        raise UnknownJob("give a job id, a unique id prefix or a job name: see %dl_jobs")
    for record in records:
        if record["id"] == wanted:
            return record
    by_prefix = [r for r in records if len(wanted) >= min_prefix and r["id"].startswith(wanted)]
    if len(by_prefix) == 1:
        return by_prefix[0]
    by_name = [r for r in records if r.get("name") == wanted]
    if by_name:
        return max(by_name, key=lambda r: r.get("created", 0))
    if by_prefix:
        newest = sorted(by_prefix, key=lambda r: r.get("created", 0))[-5:]
        shown = ", ".join(f"{r['id']} ({r.get('name')})" for r in newest)
        more = f" and {len(by_prefix) - len(newest)} more" if len(by_prefix) > len(newest) else ""
        raise AmbiguousJob(f"{wanted!r} starts {len(by_prefix)} job ids: {shown}{more}; give more of the id")
    if len(wanted) < min_prefix and any(r["id"].startswith(wanted) for r in records):
        raise UnknownJob(
            f"{wanted!r} is too short for an id prefix: give at least {min_prefix} characters (see %dl_jobs)"
        )
    raise UnknownJob(f"no job {wanted!r}: see %dl_jobs")
