"""The recommender's choice on constructed device tables where the right answer is known (no engines needed)."""

import pytest

from jupyter_dl.live.durations import format_duration
from jupyter_dl.recommend.planner import (
    DeviceKind,
    Workload,
    candidates,
    choose,
)
from jupyter_dl.wire.options import parse_duration

pytestmark = pytest.mark.fast  # the quick tier: needs no engines, server or browser

FEATURES = {
    "flops_per_sample": 1e6,
    "activations_per_sample": 1e3,
    "params": 10_000,
    "trainable_params": 10_000,
    "input_size": 64,
    "layers": 3,
}
# Per-sample step costs: "big" is 4x as fast as "small" and draws 8x the power.
PER_SAMPLE_S = {"big": 0.25e-3, "small": 1e-3}


def _devices(big=2, small=4):
    fast_network = dict(memory_bytes=16e9, bandwidth_bytes_s=1e12, latency_s=0.0)
    return [DeviceKind("big", big, power_w=400, **fast_network), DeviceKind("small", small, power_w=50, **fast_network)]


def _step_time(kind, batch):
    return PER_SAMPLE_S[kind] * batch, "constructed"


def _plan(deadline=None, devices=None, samples=64_000, epochs=1):
    workload = Workload(FEATURES, samples=samples, epochs=epochs, batch_size=32, learning_rate=0.001)
    return choose(candidates(workload, devices or _devices(), _step_time), deadline)


def test_without_a_deadline_the_lowest_energy_plan_wins():
    chosen, alternatives, headline = _plan()
    # small: 64k samples x 1 ms x 50 W = 3.2 kJ whatever the rank count; big: 64k x 0.25 ms x 400 W = 6.4 kJ.
    assert chosen.kind == "small" and chosen.energy_j == pytest.approx(3200, rel=1e-6)
    assert chosen.ranks == 4 and chosen.total_s == pytest.approx(16)  # equal energy at any rank count: the fastest
    assert headline.startswith("lowest energy")
    assert alternatives and all(alt.why_not for alt in alternatives)
    fastest = min(alternatives, key=lambda p: p.total_s)
    assert fastest.kind == "big" and fastest.ranks == 2 and "the energy" in fastest.why_not


def test_a_deadline_picks_the_cheapest_plan_that_meets_it():
    # 64 s of small-device work: 4 small ranks take 16 s, 1 big rank 16 s, 2 big ranks 8 s.
    chosen, _, _ = _plan(deadline=20)
    assert chosen.kind == "small" and chosen.ranks == 4 and chosen.total_s == pytest.approx(16)
    chosen, _, _ = _plan(deadline=10)
    assert chosen.kind == "big" and chosen.ranks == 2 and chosen.meets_deadline
    # The learning rate follows the global batch linearly.
    assert chosen.learning_rate == pytest.approx(0.001 * chosen.global_batch / 32)


def test_an_impossible_deadline_gets_the_fastest_plan_and_says_so():
    chosen, alternatives, headline = _plan(deadline=1)
    assert chosen.kind == "big" and chosen.ranks == 2
    assert headline.startswith("no plan meets the deadline of 1.0s; the fastest takes 8.0s")
    assert all("misses the deadline" in alt.why_not for alt in alternatives)


def test_a_model_too_big_for_every_device_is_refused_with_the_size():
    tiny = [DeviceKind("small", 2, power_w=50, memory_bytes=1e3, bandwidth_bytes_s=1e9)]
    with pytest.raises(ValueError, match="no device has room"):
        _plan(devices=tiny)


def test_communication_makes_more_ranks_slower_on_a_slow_network():
    slow_network = [DeviceKind("small", 4, power_w=50, memory_bytes=16e9, bandwidth_bytes_s=1e5, latency_s=0.0)]
    plans = candidates(Workload(FEATURES, 6_400, 1, 32), slow_network, _step_time)
    by_ranks = {p.ranks: p.total_s for p in plans if p.batch_size == 32}
    assert by_ranks[4] > by_ranks[1]  # 40 KB of gradients per step at 100 KB/s outweighs the split work


def test_durations_read_back():
    assert parse_duration("30m") == 1800 and parse_duration("1h30m") == 5400 and parse_duration("45") == 45
    with pytest.raises(ValueError):
        parse_duration("soon")
    # The planner writes durations the way --deadline reads them.
    for seconds in (9, 75, 1800, 5400):
        assert parse_duration(format_duration(seconds)) == seconds
