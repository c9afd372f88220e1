"""Numbers the commands show: a small job's recommendation in units that fit (ms, KiB, mJ), never a zero that only
rounding made; a run summary's metrics with the same number of significant digits, 1.000 beside 0.9931."""

import re

import pytest

from jupyter_dl.recommend.advisor import Recommendation
from jupyter_dl.recommend.planner import DeviceKind, Workload, candidates, choose

pytestmark = pytest.mark.fast  # the quick tier: needs no engines, server or browser

FEATURES = {
    "flops_per_sample": 2e4,
    "activations_per_sample": 50,
    "params": 2_000,
    "trainable_params": 2_000,
    "input_size": 64,
    "layers": 2,
}


def _small_job_recommendation():
    """A digits-sized model on two CPU engines: an epoch of a few milliseconds, a few KiB of memory."""
    workload = Workload(FEATURES, samples=1400, epochs=1, batch_size=32, learning_rate=0.001)
    devices = [DeviceKind("cpu", 2, power_w=15.0, memory_bytes=8e9, bandwidth_bytes_s=2e9, latency_s=50e-6)]
    plans = candidates(workload, devices, lambda kind, batch: (2e-4 + 1e-6 * batch, "measured"))
    chosen, alternatives, headline = choose(plans)
    return Recommendation(chosen, alternatives, headline, workload, devices)


def test_a_small_jobs_recommendation_shows_units_that_fit_and_no_rounded_zero():
    text = _small_job_recommendation().as_text()
    rows = text.splitlines()[2:]
    assert rows, text
    for row in rows:
        cells = re.split(r"\s{2,}", row.strip())
        epoch, total, energy, memory = cells[4:8] if row.startswith("chosen") else cells[3:7]
        assert re.fullmatch(r"\d+(\.\d+)?(ms|µs)", epoch), (epoch, text)
        assert re.fullmatch(r"\d+(\.\d+)?(ms|µs)", total), (total, text)
        assert re.fullmatch(r"\d+(\.\d+)? (mJ|J)", energy), (energy, text)
        assert re.fullmatch(r"\d+(\.\d+)? (KiB|MiB)", memory), (memory, text)
    assert not re.search(r"\b0(\.0)?s\b|\b0 MiB\b", text), text


def test_why_an_alternative_lost_says_how_much_slower_in_milliseconds():
    from jupyter_dl.recommend.planner import Plan

    def plan(ranks, total_s, energy_j):
        return Plan("cpu", ranks, 32, 0.001, total_s / 44, total_s, total_s, energy_j, 50_000, True, True, "measured")

    chosen, alternatives, _ = choose([plan(1, 0.004, 0.05), plan(2, 0.006, 0.1)])
    assert chosen.ranks == 1
    assert [alt.why_not for alt in alternatives] == ["2.00x the energy, and slower (6.00ms)"]  # it said "(0s)"


@pytest.mark.parametrize(
    "seconds, text",
    [(0.00042, "420µs"), (0.0042, "4.20ms"), (0.042, "42.0ms"), (0.42, "420ms"), (0.9996, "1.0s"), (4.2, "4.2s")],
)
def test_plan_durations(seconds, text):
    from jupyter_dl.recommend.quantities import plan_duration

    assert plan_duration(seconds) == text


@pytest.mark.parametrize(
    "count, text", [(300, "300 B"), (52_000, "50.8 KiB"), (3 * 2**20, "3.00 MiB"), (12 * 2**30, "12.0 GiB")]
)
def test_plan_sizes(count, text):
    from jupyter_dl.recommend.quantities import plan_bytes

    assert plan_bytes(count) == text


@pytest.mark.parametrize("joules, text", [(0.05, "50.0 mJ"), (12, "12.0 J"), (4000, "4.00 kJ"), (7.2e6, "2.00 kWh")])
def test_plan_energies(joules, text):
    from jupyter_dl.recommend.quantities import plan_energy

    assert plan_energy(joules) == text


def test_the_summary_writes_every_metric_with_four_significant_digits():
    from jupyter_dl.live.summary import as_text

    summary = {
        "job": "digits",
        "state": "succeeded",
        "ranks": 2,
        "wall_s": 12.0,
        "samples_per_s": None,
        "final_metrics": {"loss": 0.0213, "accuracy": 0.99312, "val_loss": 3.2e-5, "val_accuracy": 1.0},
        "scaling_efficiency": None,
    }
    assert "loss 0.02130 accuracy 0.9931 val_loss 3.200e-05 val_accuracy 1.000" in as_text(summary)


@pytest.mark.parametrize(
    "value, text",
    [(1, "1.000"), (1.0, "1.000"), (0.99312, "0.9931"), (12.5, "12.50"), (1234.5, "1234"), (0.0, "0.000"), (None, "-")],
)
def test_metric_values(value, text):
    from jupyter_dl.live.metric_values import format_metric

    assert format_metric(value) == text
