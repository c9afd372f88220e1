"""The gang-admission pool on a simulated GPU inventory (no GPUs here; the pool only counts them, so a simulated
inventory exercises the same code a real one does). Time is a fake clock the tests move."""

import pytest
from manual_clock import ManualClock

from jupyter_dl.pool.gang import GangPool, PoolError, Quota

pytestmark = pytest.mark.fast  # the quick tier: needs no engines, server or browser


def _pool(hosts=1, per_host=4, **kwargs):
    clock = ManualClock()
    inventory = {f"gpu-host-{h}": list(range(per_host)) for h in range(hosts)}
    return GangPool(inventory, clock=clock, **kwargs), clock


def test_a_4_gpu_job_waits_while_3_are_free_and_holds_nothing_meanwhile():
    pool, clock = _pool()
    one = pool.submit("ann", 1, owner="k1")
    assert one.state == "granted" and pool.free_count() == 3
    four = pool.submit("bob", 4, owner="k2")
    assert four.state == "queued" and four.devices == [] and pool.free_count() == 3
    assert "waiting for 4 GPUs to be free at once (3 free now)" in four.reason
    assert pool.position(four.id) == 1 and pool.partial_holds() == []
    pool.release(one.id, "ann")
    assert four.state == "granted" and len(four.devices) == 4 and pool.free_count() == 0


def test_impossible_requests_are_refused_with_what_to_do():
    pool, _ = _pool(quotas={"ann": Quota(max_gpus=2)})
    with pytest.raises(PoolError, match="the pool has 4 in all: ask for at most 4"):
        pool.submit("bob", 8)
    with pytest.raises(PoolError, match="ann's quota is 2 at once: ask for at most 2"):
        pool.submit("ann", 3)
    assert pool.tickets == {}


def test_a_quota_breach_waits_with_its_reason_and_queue_position():
    pool, _ = _pool(default_quota=Quota(max_gpus=3, max_jobs=1))
    first = pool.submit("ann", 2)
    second = pool.submit("ann", 1)
    assert second.state == "queued" and "ann runs 1 jobs, the quota is 1 at once" in second.reason
    assert pool.position(second.id) == 1
    pool.release(first.id, "ann")
    assert second.state == "granted"


def test_fair_share_serves_the_user_holding_fewer_gpus_first():
    pool, clock = _pool()
    pool.submit("ann", 3)
    clock.now = 1
    more_ann = pool.submit("ann", 2)
    clock.now = 2
    bob = pool.submit("bob", 2)
    assert [t.user for t in pool.queue()] == ["bob", "ann"]  # bob holds none, ann holds 3
    assert pool.position(bob.id) == 1 and pool.position(more_ann.id) == 2


def test_backfill_runs_small_jobs_until_the_big_one_has_waited_then_keeps_gpus_for_it():
    pool, clock = _pool(reserve_after=60)
    running = pool.submit("ann", 2)
    big = pool.submit("bob", 4)
    small = pool.submit("cid", 1)
    assert small.state == "granted"  # backfilled: 1 GPU idle otherwise
    clock.now = 61
    later = pool.submit("dan", 1)
    assert later.state == "queued" and "kept for an earlier job" in later.reason
    pool.release(running.id, "ann")
    pool.release(small.id, "cid")
    assert big.state == "granted" and later.state == "queued"


def test_a_dead_kernel_s_lease_expires_and_its_gpus_return():
    pool, clock = _pool(lease_ttl=30)
    held = pool.submit("ann", 4, owner="kernel-a")
    waiting = pool.submit("bob", 2, owner="kernel-b")
    clock.now = 20
    pool.heartbeat("kernel-b")
    clock.now = 40  # kernel-a has been silent for 40 s, kernel-b for 20 s
    assert [t.id for t in pool.expire()] == [held.id]
    assert held.state == "expired" and waiting.state == "granted"


def test_users_see_and_control_only_their_own_jobs():
    pool, _ = _pool()
    mine = pool.submit("ann", 1)
    pool.submit("bob", 1)
    assert [t.user for t in pool.visible("ann")] == ["ann"]
    assert len(pool.visible("root", admin=True)) == 2
    with pytest.raises(PoolError, match="no job 't1' of yours"):
        pool.cancel(mine.id, "bob")
    assert mine.state == "granted"
    assert pool.cancel(mine.id, "root", admin=True).state == "cancelled"


def test_gangs_stay_on_one_host_when_one_has_room():
    pool, _ = _pool(hosts=2, per_host=4)
    a = pool.submit("ann", 3)
    b = pool.submit("bob", 4)
    assert len({host for host, _ in a.devices}) == 1 and len({host for host, _ in b.devices}) == 1
    c = pool.submit("cid", 1)
    assert c.devices[0][0] == a.devices[0][0]  # the fullest host that fits: the big hole stays whole


class _PinnedCluster:
    """Stands in for a cluster of GPU engines, which this machine cannot start: one engine per GPU, two hosts."""

    def engine_ids(self):
        return [0, 1, 2, 3]

    def describe(self, ids):
        pinned = {0: ("a", "0"), 1: ("a", "1"), 2: ("b", "0"), 3: ("b", "1")}
        return [{"hostname": pinned[i][0], "gpu": pinned[i][1], "pid": 100 + i} for i in ids]

    def kinds(self, ids):
        return ["gpu:NVIDIA A100" if i < 2 else "gpu:Tesla T4" for i in ids]  # host a has A100s, host b T4s


def test_ranks_go_to_the_engines_pinned_to_the_granted_gpus():
    from jupyter_dl.errors import UsageError
    from jupyter_dl.kernel.job.runner import JobRunner

    runner = JobRunner(_PinnedCluster())
    assert runner._place(2, [("b", 1), ("a", 1)]) == [1, 3]  # host a's rank first: contiguous local ranks
    assert runner._place(2) == [0, 1]
    with pytest.raises(UsageError, match="the pool granted GPUs"):
        runner._place(2, [("c", 0), ("c", 1)])


def test_a_plan_for_one_device_kind_runs_on_engines_of_that_kind():
    from jupyter_dl.errors import UsageError
    from jupyter_dl.kernel.job.runner import JobRunner

    runner = JobRunner(_PinnedCluster())
    assert runner._place(2, kind="gpu:Tesla T4") == [2, 3]
    assert runner._place(1, [("a", 1), ("b", 0)], kind="gpu:Tesla T4") == [2]
    with pytest.raises(
        UsageError,
        match=r"the plan runs 3 ranks on gpu:Tesla T4, but the cluster has 2 such "
        r"engines \(2 x gpu:NVIDIA A100, 2 x gpu:Tesla T4\)",
    ):
        runner._place(3, kind="gpu:Tesla T4")


def test_ticket_ids_never_repeat_after_reloading_older_state():
    """A reused id would let one kernel's release end another's grant."""
    inventory = {"h": [0, 1]}
    pool = GangPool(inventory)
    first = pool.submit("ann", 1, owner="k1")
    state = pool.dump()
    state.pop("next_id")  # as written by an older version
    state["tickets"][0]["from_a_newer_version"] = True  # unknown fields are dropped, not fatal
    again = GangPool.load(inventory, state)
    assert again.submit("ann", 1, owner="k2").id != first.id
    assert again.tickets[first.id].devices == first.devices and again.free_count() == 0
