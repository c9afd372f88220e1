"""Every rank's resource use is sampled while a job runs (CPU %, resident memory; GPU where there is one), streamed
to the kernel beside the metrics, and kept in the job store; the summary says where training time went (compute vs
waiting in the gradient allreduce, from the ranks' own timings). Real 2-rank jobs on real engines. This machine has
no GPU, so the GPU series are checked absent here (tests/runtime/test_gpu_pinning.py runs on the device machine)."""

import time

import pytest

from jupyter_dl.kernel import api
from jupyter_dl.runtime.resources import ResourceSampler

# Rank 1 takes ~500 MB more a second into the job and holds it while it trains: its memory series must rise by that
# much more than rank 0's. Growth, not level: engines that ran earlier jobs differ in what they already hold.
CELL = """
import time
import keras, numpy as np
from jupyter_dl import collectives
if collectives.rank() == 1:
    time.sleep(1.5)  # a few samples first, without the ballast
ballast = np.ones((500 * 2**20 // 8,), dtype=np.float64) if collectives.rank() == 1 else None  # touched: resident
keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)])
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(x_train, y_train, epochs=6, batch_size=16, verbose=0)
del ballast
"""


def _growth(values):
    """How far a memory series rose above where it started."""
    return max(values) - values[0]


def _last_job():
    return api.session().jobs.all()[-1]


def test_each_rank_streams_its_resource_use_into_the_store(shell, digits):
    shell.user_ns.update(digits)
    result = shell.run_cell("%%distribute -n 2 --name resources\n" + CELL, store_history=False)
    assert result.success, result.error_in_exec
    job = _last_job()
    samples = [r for r in api.session().store.metrics(job.id)[0] if r.get("kind") == "resources"]
    by_rank = {rank: [r for r in samples if r["rank"] == rank] for rank in (0, 1)}
    for rank, series in by_rank.items():
        assert len(series) >= 4, f"rank {rank}: {len(series)} samples"
        times = [r["t"] for r in series]
        assert times == sorted(times)
        # A few samples a second: the default interval is 0.25 s (allow for a busy 2-core machine).
        gaps = [b - a for a, b in zip(times, times[1:])]
        assert 0.2 <= sorted(gaps)[len(gaps) // 2] <= 1.0, gaps
        assert all(0 <= r["cpu"] <= 100 * 64 for r in series)
        assert max(r["cpu"] for r in series) > 10  # a training rank is busy
        assert all(100 < r["rss_mb"] < 20_000 for r in series)  # TensorFlow alone is a few hundred MB
        assert not any("gpu_util" in r for r in series)  # no GPU on this machine
    growth = {rank: _growth([r["rss_mb"] for r in series]) for rank, series in by_rank.items()}
    assert growth[1] - growth[0] > 300, growth

    # The kernel-side state (what the live view draws) keeps the same series per rank, rebuilt here from the store.
    from jupyter_dl.live.state import TrainingState

    state = TrainingState()
    state.consume(api.session().store.metrics(job.id)[0])
    assert set(state.resources) == {0, 1}
    assert len(state.resources[1]["rss_mb"]) == len(state.resources[1]["t"])

    # Where the time went: every rank timed its gradient allreduces inside the traced train step.
    split = state.time_split()
    assert set(split) == {0, 1}
    for rank, part in split.items():
        assert 0 < part["allreduce_s"] < part["seconds"], (rank, part)


@pytest.mark.fast
def test_sampling_off_sends_nothing_and_a_sampler_outside_an_engine_keeps_its_samples():
    sampler = ResourceSampler(rank=0, interval=0)
    with sampler:
        time.sleep(0.3)
    assert list(sampler.sent) == []

    published = []
    sampler = ResourceSampler(rank=3, interval=0.05, publish=published.append, flush_interval=0.1)
    with sampler:
        block = bytearray(200 * 2**20)  # noqa: F841 (resident while sampled)
        block[::4096] = b"x" * len(block[::4096])
        time.sleep(0.5)
    assert len(sampler.sent) >= 5
    assert all(r["rank"] == 3 and r["kind"] == "resources" for r in sampler.sent)
    assert all(key.startswith("jdl.3.r") for batch in published for key in batch)
    assert max(r["rss_mb"] for r in sampler.sent) > 200
    assert sampler.cpu_seconds < 0.1  # a few dozen samples cost milliseconds


def test_the_live_view_draws_each_ranks_resources_and_the_summary_says_where_time_went(dl_session, digits):
    import jupyter_dl
    from jupyter_dl.live.summary import as_text

    cell = CELL.replace("epochs=6", "epochs=3")
    result = jupyter_dl.distribute(cell, n=2, namespace=dict(digits), plot=True)
    names = {trace.name for trace in result.view.resources.figure.data}
    assert {"rank 0 CPU %", "rank 1 CPU %", "rank 0 memory MB", "rank 1 memory MB"} <= names
    memory = {t.name: list(t.y) for t in result.view.resources.figure.data if t.name.endswith("memory MB")}
    assert _growth(memory["rank 1 memory MB"]) - _growth(memory["rank 0 memory MB"]) > 300  # the ballast, drawn
    summary = result.view.summary
    assert set(summary["time_split"]) == {0, 1} and set(summary["resources"]) == {0, 1}
    for rank in (0, 1):  # the summary's peak is the series' peak
        assert summary["resources"][rank]["rss_peak_mb"] >= max(memory[f"rank {rank} memory MB"]) - 1
    text = as_text(summary)
    assert "where time went: " in text and "% in the gradient allreduce" in text, text
    assert "rank 1 CPU " in text and "peak memory" in text, text
    print(text)
