"""`%dl_jobs`' table: the newest jobs of the job store, as a value that shows itself.

The magic returns a JobTable, as `%dl_compare` and `%dl_recommend` return objects that draw themselves: in a
notebook it shows as an HTML table (in a terminal, as text) with a last line saying what was left out and how to see
it, `jobs = %dl_jobs` binds it without showing anything, and it is a list of plain dicts (one per job, newest
first) that `jobs.to_dataframe()` turns into a pandas DataFrame. Printing the table and returning None would leave
nothing to work with; returning a bare DataFrame would show every column pandas' way and lose the last line.
"""

import datetime
import html
import os

from traitlets import Integer
from traitlets.config import Configurable

from jupyter_dl.jobs.listing import Selection, parse_states, select
from jupyter_dl.jobs.model import FINAL_STATES, Job
from jupyter_dl.live.durations import format_duration

COLUMNS = ("ID", "NAME", "STATE", "RANKS", "PROGRESS", "STARTED", "ELAPSED", "NOTEBOOK")
ROW_KEYS = ("id", "name", "state", "ranks", "progress", "started", "elapsed_s", "notebook")  # a row's dict, in order


class JobListSettings(Configurable):
    limit = Integer(
        20,
        help="How many of the newest jobs %dl_jobs shows without --limit or --all (0: every job).",
    ).tag(config=True)


def list_jobs(store, name=None, states=None, probes=False, limit=None, everything=False) -> "JobTable":
    """The table of the store's jobs (see jobs.listing.select); `everything` shows all jobs, probes included. Jobs
    whose kernel died are marked lost first, so nothing shows as running forever."""
    records = store.records()
    unfinished = [Job.from_dict(r) for r in records if r.get("state") not in FINAL_STATES]
    lost = {job.id: job.to_dict() for job in store.reap_lost(unfinished)}
    records = [lost.get(r["id"], r) for r in records]
    wanted_states = parse_states(states)
    if everything:
        selection = select(records, name, wanted_states, probes=True, limit=None)
    else:
        selection = select(records, name, wanted_states, probes, limit or None)
    return JobTable([_row(r) for r in selection.records], _footer(selection, bool(records), name, states))


def _row(record) -> dict:
    job = Job.from_dict(record)
    started = job.timestamps.get("starting", job.created)
    return {
        "id": job.id,
        "name": job.name,
        "state": job.state,
        "ranks": job.n,
        "progress": (job.progress or {}).get("fraction"),
        "started": datetime.datetime.fromtimestamp(started),
        "elapsed_s": job.elapsed,
        "notebook": job.notebook,
    }


def _footer(selection: Selection, any_jobs: bool, name, states) -> str:
    """The last line: what matched but is not shown, and the option that shows it."""
    if not selection.records:
        if not any_jobs:
            return "no jobs yet; put %%distribute -n 2 on top of a Keras cell to start one"
        filters = " ".join(f for f in (f"--name {name}" if name else "", f"--state {states}" if states else "") if f)
        hidden = f" ({selection.probes_hidden} probe jobs hidden: add --probes)" if selection.probes_hidden else ""
        return f"no jobs match {filters or 'the filters'}{hidden}; %dl_jobs --all lists every job"
    parts = []
    if selection.more:
        total = len(selection.records) + selection.more
        parts.append(f"{selection.more} older job{_s(selection.more)} not shown: %dl_jobs --limit {total} or --all")
    if selection.probes_hidden:
        count = selection.probes_hidden
        parts.append(f"{count} probe job{_s(count)} (jupyter-dl's own measurements) hidden: --probes")
    return "; ".join(parts)


def _s(count):
    return "" if count == 1 else "s"


class JobTable(list):
    """Jobs as rows (dicts: id, name, state, ranks, progress 0..1 or None, started (datetime), elapsed_s, notebook),
    newest first, shown as a table with a last line (`footer`) about what was left out."""

    def __init__(self, rows=(), footer=""):
        super().__init__(rows)
        self.footer = footer

    def cells(self, cwd=None) -> list:
        """Each row as the table's text cells."""
        today = datetime.date.today()
        return [
            (
                row["id"],
                row["name"],
                row["state"],
                str(row["ranks"]),
                "-" if row["progress"] is None else f"{row['progress']:.0%}",
                started_text(row["started"], today),
                format_duration(row["elapsed_s"]),
                shown_path(row["notebook"], cwd),
            )
            for row in self
        ]

    def as_text(self) -> str:
        rows = [COLUMNS, *self.cells()] if self else []
        widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))] if rows else []
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
        return "\n".join(lines + ([self.footer] if self.footer else []))

    def _repr_html_(self) -> str:
        head = "".join(f"<th style='text-align:left'>{c.lower()}</th>" for c in COLUMNS)
        body = "".join(
            "<tr>" + "".join(f"<td style='text-align:left'>{html.escape(c)}</td>" for c in cells) + "</tr>"
            for cells in self.cells()
        )
        table = f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>" if self else ""
        footer = f"<p>{html.escape(self.footer)}</p>" if self.footer else ""
        return f"<div class='jp-dl-jobs'>{table}{footer}</div>"

    def __repr__(self) -> str:
        return self.as_text()

    def _repr_pretty_(self, printer, cycle):
        printer.text(self.as_text())

    def to_dataframe(self):
        """The rows as a pandas DataFrame (one row per job, the dict keys as columns)."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("to_dataframe needs pandas (pip install pandas); the table is a list of dicts") from None
        return pd.DataFrame(list(self), columns=list(ROW_KEYS))


def started_text(moment: datetime.datetime, today: datetime.date) -> str:
    """'14:03:12' today, 'Nov 20 14:03' earlier this year, '2025-11-20' before."""
    if moment.date() == today:
        return moment.strftime("%H:%M:%S")
    if moment.year == today.year:
        return moment.strftime("%b %d %H:%M")
    return moment.strftime("%Y-%m-%d")


def shown_path(path, cwd=None) -> str:
    """A job's notebook (stored absolute) as the reader of %dl_jobs knows it: relative to this kernel's working
    directory (the notebook's folder) when it is under it, else with the home directory as ~, else as stored."""
    if not path:
        return "-"
    cwd = cwd or os.getcwd()
    relative = os.path.relpath(path, cwd) if os.path.isabs(path) else path
    if relative != os.pardir and not relative.startswith(os.pardir + os.sep):
        return relative
    home = os.path.expanduser("~")
    if home not in ("", "/") and path.startswith(home + os.sep):
        return "~" + path[len(home) :]
    return path
