"""One duration format for the whole notebook side (live view, %dl_jobs, summaries, comparisons, recommendations)."""

import datetime
import math

import pytest

from jupyter_dl.live.durations import format_duration
from jupyter_dl.wire.options import parse_duration

pytestmark = pytest.mark.fast  # the quick tier: needs no engines, server or browser


@pytest.mark.parametrize(
    "seconds, text",
    [
        (0, "0.0s"),
        (4.24, "4.2s"),
        (5, "5.0s"),
        (9.94, "9.9s"),
        (9.96, "10s"),  # tenths only while they still read below ten
        (42.4, "42s"),
        (59.6, "1m00s"),  # rounds up into the next unit, never '60s'
        (60, "1m00s"),
        (95, "1m35s"),
        (3599.4, "59m59s"),
        (3600, "1h00m00s"),
        (3700, "1h01m40s"),
        (90061, "25h01m01s"),  # no days: hours go on counting
    ],
)
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


@pytest.mark.parametrize("seconds", [None, math.nan, math.inf, -math.inf])
def test_an_unknown_duration_is_a_dash(seconds):
    assert format_duration(seconds) == "-"


def test_a_negative_duration_counts_as_zero():
    assert format_duration(-3) == "0.0s"  # a clock that stepped back, or a deadline already met


@pytest.mark.parametrize("seconds", [0.5, 7.3, 12, 75, 1800, 3700, 5400, 86399])
def test_what_it_writes_reads_back_as_a_deadline(seconds):
    assert parse_duration(format_duration(seconds)) == pytest.approx(seconds, abs=0.05)


def test_the_live_eta_the_summary_and_the_jobs_table_write_it():
    from jupyter_dl.kernel.job_listing import JobTable
    from jupyter_dl.live.summary import as_text
    from jupyter_dl.live.view import progress_text

    assert progress_text({"epoch": 1, "epochs": 3, "eta_s": 95}) == "epoch 1/3 · ETA 1m35s"
    summary = {
        "job": "j",
        "state": "succeeded",
        "ranks": 2,
        "wall_s": 3700.0,
        "samples_per_s": None,
        "final_metrics": {},
        "scaling_efficiency": None,
    }
    assert as_text(summary).startswith("j: succeeded in 1h01m40s on 2 ranks")
    row = {"id": "a1b2", "name": "j", "state": "running", "ranks": 2, "progress": None, "elapsed_s": 5.0}
    row.update(started=datetime.datetime(2020, 1, 2, 3, 4), notebook=None)
    assert JobTable([row]).as_text().splitlines()[1].split()[-3:] == ["2020-01-02", "5.0s", "-"]
