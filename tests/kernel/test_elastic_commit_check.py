"""The soaks' and elastic tests' lost-commit check (tests/support/elastic_faults.py) on the notes a host cut leaves.

The last collective before a cut can finish on some ranks only: the next group's leader holds its commit, while a
cut rank, and even a survivor, never noted the step (the host-loss soak's leader's-host cut showed it). Those ranks'
samples went into the committed update all the same, so the check must count them, and must still catch a group
that trains a committed sample again or skips one. The notes are written here as the elastic cell writes them, for
a 4-rank group cut inside step 3 of epoch 2 and a 2-rank group going on from there.
"""

import types

import pytest
from elastic_faults import BATCH, EPOCHS, HOST_FAULTS, ElasticRun

pytestmark = pytest.mark.fast

STEPS_ON_4 = 4  # steps an epoch on 4 ranks (256 samples, 16 a rank a step)


class Notes:
    """The events.jsonl lines of one job, in time order."""

    def __init__(self):
        self.events, self.t = [], 1000.0

    def note(self, event, pid, rank, size, **fields):
        self.t += 0.001
        self.events.append({"event": event, "t": self.t, "run": f"{pid}-{size}", "pid": pid, "rank": rank, **fields})
        self.events[-1]["size"] = size

    def step(self, pid, rank, size, epoch, steps, commits, ids):
        self.note("step_begin", pid, rank, size, epoch=epoch, commits=commits)
        self.note("trained", pid, rank, size, epoch=epoch, steps=steps, commits=commits, ids=sorted(ids))


def batch(first, size, rank, step):
    """The samples rank `rank` of `size` trains in step `step` (1-based) of the epoch's rest from sample `first`."""
    start = first + ((step - 1) * size + rank) * BATCH
    return list(range(start, start + BATCH))


def cut_job(resume_steps=3, rest_steps=2):
    """A `-n 2:4` job: ranks 0, 1 (pids 10, 11) on the cut host, 2, 3 (pids 12, 13) survive. Step 3 of epoch 2
    finishes on ranks 0 and 2 only; the new group (12 as rank 0, 13 as rank 1) goes on from `resume_steps` steps of
    epoch 2, trains `rest_steps` steps of its rest, then the remaining epochs."""
    notes = Notes()
    pids = [10, 11, 12, 13]
    seen = {pid: [] for pid in pids}
    commits = 0
    for pid, rank in zip(pids, range(4)):
        notes.note("begin", pid, rank, 4)
    notes.note("start", 10, 0, 4, epoch=0)
    for epoch in range(3):
        for pid in pids:
            seen[pid] = []
        for step in range(1, STEPS_ON_4 + 1 if epoch < 2 else 4):
            finishing = [10, 12] if (epoch, step) == (2, 3) else pids
            for rank, pid in enumerate(pids):
                if pid in finishing:
                    seen[pid] += batch(0, 4, rank, step)
                    notes.step(pid, rank, 4, epoch, step, commits, seen[pid])
            commits += 1
        if epoch < 2:
            for rank, pid in enumerate(pids):
                notes.note("epoch_end", pid, rank, 4, epoch=epoch)
    notes.note("ended", 12, 2, 4, how="UnknownError", commits=commits)
    notes.note("ended", 13, 3, 4, how="UnknownError", commits=commits - 1)
    change = notes.t + 0.0005

    first = resume_steps * 4 * BATCH  # where the new group's rest of epoch 2 begins
    optimizer_steps = 8 + resume_steps
    for pid, rank in ((12, 0), (13, 1)):
        notes.note("begin", pid, rank, 2)
    notes.note("start", 12, 0, 2, epoch=2)
    for epoch, start, steps in [(2, first, rest_steps)] + [(e, 0, 2 * STEPS_ON_4) for e in range(3, EPOCHS)]:
        seen[12], seen[13] = [], []
        for step in range(1, steps + 1):
            for pid, rank in ((12, 0), (13, 1)):
                seen[pid] += batch(start, 2, rank, step)
                notes.step(pid, rank, 2, epoch, step, optimizer_steps, seen[pid])
            optimizer_steps += 1
        for pid, rank in ((12, 0), (13, 1)):
            notes.note("epoch_end", pid, rank, 2, epoch=epoch)
    for pid, rank in ((12, 0), (13, 1)):
        notes.note("ended", pid, rank, 2, how="finished", commits=optimizer_steps)

    job = types.SimpleNamespace(membership=[{"t": 999.0}, {"t": change}])
    values = {"history": types.SimpleNamespace(epoch=list(range(EPOCHS))), "steps": optimizer_steps}
    result = types.SimpleNamespace(job=job, values=values)
    return ElasticRun(HOST_FAULTS[1], None, result, 999.0, notes.t, notes.events)


def test_the_samples_of_ranks_cut_short_in_the_committed_step_count_as_trained():
    run = cut_job()
    parts, problems = run.committed_parts()
    assert problems == []
    steps, ids, unnoted = parts[(0, 2)]
    # 3 committed steps: ranks 0 and 2 noted theirs; ranks 1 and 3 noted 2, and their 3rd step's 32 samples are unnoted
    assert (steps, len(ids), unnoted) == (3, 3 * 16 * 2 + 2 * 16 * 2, 32)
    assert run.lost_commits() == []


def test_a_group_that_trains_a_committed_step_again_is_caught():
    run = cut_job(resume_steps=2, rest_steps=4)  # the leader held 3 steps, the new group redid the 3rd
    assert any("samples by times trained" in problem for problem in run.lost_commits())


def test_a_group_that_skips_part_of_the_epoch_is_caught():
    run = cut_job(rest_steps=1)  # one of the rest's two steps never trained
    assert any("samples by times trained {1: 192, 0: 64} (32 unnoted" in problem for problem in run.lost_commits())
