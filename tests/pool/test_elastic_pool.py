"""Elastic jobs in the GPU pool (issue 27): admitted on their minimum, growing into idle GPUs, giving them back when
another job waits for them. The pool only counts GPUs, so simulated inventories exercise the code a GPU host runs:
the pure scheduler with a fake clock, the embedded pool through its state file and a real lease thread, and the
`jupyter-dl-pool` service behind a real JupyterHub."""

import time

import pytest
from manual_clock import ManualClock

from jupyter_dl.pool.gang import GangPool, PoolError, Quota, UnknownTicket

fast = pytest.mark.fast  # all but the hub test: no engines, server or browser


def _pool(per_host=8, hosts=1, **kwargs):
    clock = ManualClock()
    inventory = {f"h{h}": list(range(per_host)) for h in range(hosts)}
    return GangPool(inventory, clock=clock, **kwargs), clock


@fast
def test_an_elastic_job_starts_on_what_is_free_and_grows_into_gpus_freed_later():
    pool, _ = _pool()
    other = pool.submit("bob", 5)
    elastic = pool.submit("ann", 8, min_gpus=2, job="train")
    assert elastic.state == "granted" and elastic.held == 3 and pool.free_count() == 0  # its 2, and 1 idle one
    assert elastic.shrink_to is None and pool.partial_holds() == []
    pool.release(other.id, "bob")
    assert elastic.held == 8 and len(set(elastic.devices)) == 8 and pool.free_count() == 0


@fast
def test_an_elastic_job_waits_whole_for_its_minimum():
    pool, _ = _pool()
    pool.submit("bob", 5)
    elastic = pool.submit("ann", 8, min_gpus=4)
    assert elastic.state == "queued" and elastic.devices == [] and pool.free_count() == 3
    assert elastic.reason == "waiting for 4 GPUs to be free at once (3 free now)"


@fast
def test_elastic_requests_are_checked_like_fixed_ones():
    pool, _ = _pool(quotas={"ann": Quota(max_gpus=4)})
    with pytest.raises(PoolError, match=r"needs 1 <= MIN <= MAX GPUs \(asked for 5:4\)"):
        pool.submit("bob", 4, min_gpus=5)
    with pytest.raises(PoolError, match="asked for 9 GPUs; the pool has 8 in all: ask for at most 8"):
        pool.submit("bob", 9, min_gpus=2)
    with pytest.raises(PoolError, match="ann's quota is 4 at once: ask for at most 4"):
        pool.submit("ann", 6, min_gpus=2)
    assert pool.submit("bob", 3, min_gpus=3).elastic is False  # 3:3 is a fixed job
    assert len(pool.tickets) == 1


@fast
def test_two_users_on_8_gpus_the_elastic_job_shrinks_for_the_other_users_gang():
    pool, clock = _pool()
    a = pool.submit("ann", 8, min_gpus=2, job="a-train", owner="kernel-a")
    assert a.held == 8
    clock.now = 5
    b = pool.submit("bob", 4, job="b-gang", owner="kernel-b")
    assert b.state == "queued" and b.devices == []
    assert (a.shrink_to, a.shrink_reason) == (4, "job b-gang of bob waits for 4 GPUs")
    assert b.reason == "waiting for 4 GPUs (0 free now): elastic jobs are asked to give back 4"
    keep, give = a.devices[:4], a.devices[4:]
    clock.now = 7
    pool.resize(a.id, "ann", keep)
    assert b.state == "granted" and sorted(b.devices) == sorted(give)  # exactly what ann gave back
    assert a.devices == keep and a.shrink_to is None and a.shrink_reason == ""
    assert pool.free_count() == 0 and pool.partial_holds() == []
    pool.release(b.id, "bob")
    assert a.held == 8  # idle again: lent back


@fast
def test_shrinking_asks_the_lowest_priority_first_then_the_largest_surplus():
    pool, _ = _pool()
    low = pool.submit("ann", 6, min_gpus=2, priority=0)
    high = pool.submit("bob", 4, min_gpus=1, priority=1)
    assert (low.held, high.held) == (6, 2)
    pool.submit("cid", 3)
    assert (low.shrink_to, high.shrink_to) == (3, None)  # low has surplus enough: high is not asked

    pool, _ = _pool()
    big = pool.submit("ann", 5, min_gpus=1)
    small = pool.submit("bob", 3, min_gpus=1)
    assert (big.surplus, small.surplus) == (4, 2)
    waiter = pool.submit("cid", 2)
    assert (big.shrink_to, small.shrink_to) == (3, None)  # the largest surplus gives first
    pool.cancel(waiter.id, "cid")
    assert (big.shrink_to, small.shrink_to) == (None, None)  # withdrawn when no one waits any more
    pool.submit("cid", 5)
    assert (big.shrink_to, small.shrink_to) == (1, 2)  # 4 from the largest, the 5th from the next


@fast
def test_no_job_is_shrunk_for_a_job_that_still_could_not_start():
    pool, _ = _pool()
    fixed = pool.submit("bob", 4)
    elastic = pool.submit("ann", 4, min_gpus=2)
    assert elastic.held == 4
    waiter = pool.submit("cid", 8)  # even all of ann's surplus (2) would leave it short
    assert elastic.shrink_to is None and waiter.reason == "waiting for 8 GPUs to be free at once (0 free now)"
    pool.release(fixed.id, "bob")  # now 4 free + ann's 2 above its minimum = 6: still short
    assert elastic.shrink_to is None and elastic.held == 4 and waiter.state == "queued"


@fast
def test_gpus_kept_for_a_waiting_gang_are_lent_to_no_one_and_not_backfilled():
    pool, _ = _pool()
    fixed = pool.submit("bob", 2)
    first = pool.submit("ann", 6, min_gpus=2)
    assert first.held == 6
    pool.release(fixed.id, "bob")
    assert first.held == 6 and pool.free_count() == 2  # at its maximum
    waiter = pool.submit("cid", 5)  # 2 free + 3 from ann
    assert waiter.state == "queued" and first.shrink_to == 3
    late = pool.submit("dan", 8, min_gpus=1)
    small = pool.submit("eve", 1)
    assert late.state == "queued" and small.state == "queued" and pool.free_count() == 2  # both kept for cid
    pool.resize(first.id, "ann", first.devices[:3])
    assert waiter.state == "granted" and len(waiter.devices) == 5


@fast
def test_resize_gives_back_only_what_the_job_lets_go_and_refuses_what_it_cannot_do():
    pool, _ = _pool()
    elastic = pool.submit("ann", 4, min_gpus=2)
    fixed = pool.submit("bob", 2)
    with pytest.raises(PoolError, match="must keep at least 2 GPUs \\(its minimum\\), not 1: to stop, release it"):
        pool.resize(elastic.id, "ann", elastic.devices[:1])
    with pytest.raises(PoolError, match=r"does not hold \[\('h0', 7\)\]"):
        pool.resize(elastic.id, "ann", [*elastic.devices[:2], ("h0", 7)])
    with pytest.raises(PoolError, match="has a fixed size of 2 GPUs: only an elastic job"):
        pool.resize(fixed.id, "bob", fixed.devices[:1])
    with pytest.raises(UnknownTicket):
        pool.resize(elastic.id, "bob", elastic.devices[:2])
    assert elastic.held == 4 and pool.free_count() == 2  # nothing changed
    free = [("h0", g) for g in pool._free["h0"]]
    given = elastic.devices[2:]
    waiter = pool.submit("cid", 4)
    assert elastic.shrink_to == 2
    pool.resize(elastic.id, "ann", elastic.devices[:2])
    assert sorted(waiter.devices) == sorted(free + given)  # the 2 free and the 2 given back, none of ann's others
    assert pool.free_count() == 0 and elastic.held == 2
    pool.release(elastic.id, "ann")
    with pytest.raises(PoolError, match="holds no GPUs \\(released\\): there is nothing to resize"):
        pool.resize(elastic.id, "ann", [])


@fast
def test_quotas_count_an_elastic_jobs_gpus_only_while_it_holds_them():
    pool, _ = _pool(default_quota=Quota(max_gpus=4))
    elastic = pool.submit("ann", 4, min_gpus=1)
    assert elastic.held == 4 and pool.free_count() == 4  # the quota stops its growth, not the pool
    second = pool.submit("ann", 2)
    assert second.state == "queued" and elastic.shrink_to == 2  # ann's own borrowed GPUs are asked back for it
    assert second.reason == (
        "waiting: ann holds GPUs lent to their elastic jobs over the quota of 4; they are asked to give back 2"
    )
    assert elastic.shrink_reason == f"job {second.id} of ann waits within ann's quota"
    pool.resize(elastic.id, "ann", elastic.devices[:2])
    assert second.state == "granted" and elastic.held == 2  # given back: no longer counted
    pool.release(second.id, "ann")
    assert elastic.held == 4 and elastic.shrink_to is None
    other = pool.submit("ann", 4, min_gpus=4)  # would need all 4 of the quota: ann's surplus (3) is not enough
    assert other.state == "queued" and "ann holds 4 GPUs, the quota is 4 at once" in other.reason
    assert elastic.shrink_to is None  # not shrunk for nothing


@fast
def test_a_users_own_elastic_job_shrinks_only_when_that_lets_their_gang_start():
    pool, _ = _pool(quotas={"ann": Quota(max_gpus=6)})
    elastic = pool.submit("ann", 6, min_gpus=2, job="sweep")
    bob = pool.submit("bob", 2)
    assert elastic.held == 6 and bob.state == "granted" and pool.free_count() == 0
    gang = pool.submit("ann", 3, job="eval")
    # Within the quota ann's elastic job must drop to 3; the 3 GPUs it gives back are the ones the gang needs.
    assert (elastic.shrink_to, gang.state) == (3, "queued")
    pool.resize(elastic.id, "ann", elastic.devices[:3])
    assert gang.state == "granted" and elastic.held == 3 and bob.held == 2

    pool, _ = _pool(quotas={"ann": Quota(max_gpus=6, max_jobs=1)})
    elastic = pool.submit("ann", 6, min_gpus=2)
    gang = pool.submit("ann", 2)  # over the job count: shrinking would not let it start
    assert elastic.shrink_to is None and "the quota is 1 at once" in gang.reason

    pool, _ = _pool(quotas={"ann": Quota(max_gpus=4)})
    elastic = pool.submit("ann", 4, min_gpus=3)
    gang = pool.submit("ann", 3)  # its 1 GPU of surplus would leave the gang over the quota still
    assert elastic.shrink_to is None and "ann holds 4 GPUs, the quota is 4 at once" in gang.reason


@fast
def test_a_request_ignored_past_the_grace_stands_and_the_job_borrows_no_more():
    pool, clock = _pool(shrink_grace=30)
    elastic = pool.submit("ann", 8, min_gpus=2, owner="k-a")
    waiter = pool.submit("bob", 4, owner="k-b")
    clock.now = 29
    pool.heartbeat("k-a")
    pool.heartbeat("k-b")
    pool.tick()
    assert elastic.shrink_to == 4 and not elastic.shrink_overdue
    clock.now = 31
    pool.tick()
    assert elastic.shrink_to == 4 and elastic.shrink_overdue  # still asked; the GPUs stay with its running ranks
    assert elastic.held == 8 and waiter.state == "queued"
    pool.resize(elastic.id, "ann", elastic.devices[:4])
    assert waiter.state == "granted"
    pool.release(waiter.id, "bob")
    assert elastic.held == 4 and pool.free_count() == 4  # overdue once: lent nothing more


@fast
def test_a_pool_of_fixed_jobs_never_asks_anyone_to_shrink_and_state_round_trips():
    pool, _ = _pool()
    fixed = pool.submit("ann", 6)
    waiter = pool.submit("bob", 4)
    assert waiter.reason == "waiting for 4 GPUs to be free at once (2 free now)"
    assert fixed.shrink_to is None and fixed.held == 6 and pool.free_count() == 2  # no fixed job ever grows
    elastic = pool.submit("cid", 2, min_gpus=1)
    assert elastic.held == 2 and fixed.held == 6
    again = GangPool.load(pool.inventory, pool.dump())
    copy = again.tickets[elastic.id]
    assert (copy.min_gpus, copy.devices, again.free_count()) == (1, elastic.devices, 0)


@fast
def test_growth_follows_pinned_gpus_and_prefers_the_hosts_a_job_is_on():
    pool, _ = _pool(per_host=4, hosts=2)
    pool.submit("bob", 1, allowed=[("h0", 0)])
    elastic = pool.submit("ann", 5, min_gpus=2, allowed=[("h0", 1), ("h0", 2), ("h1", 0), ("h1", 1), ("h1", 2)])
    assert sorted(elastic.devices) == [("h0", 1), ("h0", 2), ("h1", 0), ("h1", 1), ("h1", 2)]
    assert pool.free_count() == 2  # h0:3 and h1:3 are not among its engines' GPUs

    pool, _ = _pool(per_host=4, hosts=2)
    pool.submit("bob", 1)
    pool.submit("cid", 2)
    assert pool._free == {"h0": [3], "h1": [0, 1, 2, 3]}
    elastic = pool.submit("ann", 4, min_gpus=2)
    assert {h for h, _ in elastic.devices} == {"h1"} and elastic.held == 4  # grew where it runs, not into h0:3


# ---------------------------------------------------------------------------------- the embedded pool and a lease
@fast
def test_an_elastic_lease_on_the_embedded_pool_follows_its_gpus(tmp_path):
    from jupyter_dl.jobs import Job
    from jupyter_dl.pool.lease import PoolLease
    from jupyter_dl.pool.local import LocalPool

    state = str(tmp_path / "pool.json")
    pool = LocalPool(simulate_gpus=8, state_file=state)
    lease = PoolLease(pool, 8, Job(name="elastic", n=2), pool.owner, poll_s=0.05, min_gpus=2)
    with lease as granted:
        assert len(granted["devices"]) == 8 and granted["min_gpus"] == 2
        assert len(lease.devices()) == 8 and lease.shrink_request() is None
        other = LocalPool(simulate_gpus=8, state_file=state).submit(4, job="gang")  # another notebook's gang
        assert other["state"] == "queued"
        request = _wait(lease.shrink_request)
        assert request[0] == 4 and request[1].startswith("job gang of ") and request[1].endswith("waits for 4 GPUs")
        held = lease.devices()
        kept = lease.resize(held[:4])
        assert kept == held[:4] and lease.shrink_request() is None
        now = pool.ticket(other["id"])
        assert now["state"] == "granted" and sorted(map(tuple, now["devices"])) == sorted(held[4:])
        pool.release(other["id"])
        assert len(_lease_devices(lease, 8)) == 8  # lent back at the next refresh
    assert pool.summary() == {"gpus": 8, "free": 8, "queued": 0}


def _lease_devices(lease, count, timeout=10):
    deadline = time.monotonic() + timeout
    while len(lease.devices()) != count:
        assert time.monotonic() < deadline, f"the lease holds {lease.devices()}, not {count} GPUs"
        time.sleep(0.02)
    return lease.devices()


def _wait(read, timeout=10):
    deadline = time.monotonic() + timeout
    while (value := read()) is None:
        assert time.monotonic() < deadline, "the lease never saw the pool's request"
        time.sleep(0.02)
    return value


# ------------------------------------------------------------------------------------- the hub's pool service
def test_through_the_hub_service_an_elastic_job_gives_back_gpus_within_seconds_when_a_gang_arrives(tmp_path):
    """ann's elastic job (2:8) holds all 8 GPUs through its lease; bob's 4-GPU gang arrives. The loop below answers
    the lease's shrink requests as the job's commit points do (reading and resizing through the lease only)."""
    import threading

    from local_hub import SERVICE, running_hub, user_token

    from jupyter_dl.jobs import Job
    from jupyter_dl.pool.client import PoolClient
    from jupyter_dl.pool.lease import PoolLease

    with running_hub(tmp_path, {"ann", "bob"}, ["--simulate-gpus=sim0:8", "--max-gpus=8"]) as hub:
        scopes = [f"access:services!service={SERVICE}"]
        ann = PoolClient(hub["url"], user_token(hub, "ann", scopes))
        bob = PoolClient(hub["url"], user_token(hub, "bob", scopes))
        lease = PoolLease(ann, 8, Job(name="ann-elastic", n=2), "kernel-ann", poll_s=0.1, min_gpus=2)
        stop, answered = threading.Event(), []

        def commit_points():
            while not stop.wait(0.05):
                request = lease.shrink_request()
                if request is not None:
                    held = lease.devices()
                    answered.append((request, held[request[0] :], lease.resize(held[: request[0]])))

        with lease as granted:
            assert granted["state"] == "granted" and len(granted["devices"]) == 8 and granted["min_gpus"] == 2
            with pytest.raises(PoolError, match="must keep at least 2 GPUs.*HTTP 409"):
                lease.resize(lease.devices()[:1])
            with pytest.raises(PoolError, match=f"no job '{granted['id']}' of yours in the pool.*HTTP 404"):
                bob.resize(granted["id"], [])
            answering = threading.Thread(target=commit_points, daemon=True)
            answering.start()
            try:
                arrived = time.monotonic()
                gang = bob.submit(4, job="bob-gang", owner="kernel-bob")
                assert gang["state"] == "queued" and "elastic jobs are asked to give back 4" in gang["reason"]
                gang = bob.wait_granted(gang["id"], owner="kernel-bob", timeout=10, poll=0.1)
                assert time.monotonic() - arrived < 10  # the bound
            finally:
                stop.set()
                answering.join(5)
            ((request, given, kept),) = answered
            assert request == (4, "job bob-gang of bob waits for 4 GPUs") and len(kept) == 4
            assert sorted(map(tuple, gang["devices"])) == sorted(given)  # exactly what ann's job let go
            view = ann.ticket(granted["id"])
            assert view["shrink_to"] is None and sorted(map(tuple, view["devices"])) == sorted(kept)
            bob.release(gang["id"])
            assert len(_lease_devices(lease, 8)) == 8  # idle again: lent back to ann's job
        assert ann.summary() == {"gpus": 8, "free": 8, "queued": 0}


@fast
def test_the_kernels_pool_choice_leases_an_elastic_job_between_its_min_and_max():
    from jupyter_dl.jobs import Job
    from jupyter_dl.pool.choice import PoolChoice

    choice = PoolChoice("http://pool.invalid/services/jupyter-dl-pool", False, None, None)
    elastic = choice.lease(Job(name="j", n=8), 8, None, min_n=2)
    fixed = choice.lease(Job(name="k", n=8), 8, None)
    assert (elastic.gpus, elastic.min_gpus, fixed.gpus, fixed.min_gpus) == (8, 2, 8, None)
