import pytest

from dynamo_lite.protocol import LoadReport, RequestId, WorkerId
from router.load import LoadTracker

A = WorkerId("a")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def report(waiting=0, kv_usage=0.0, ts=1.0, running=0):
    return LoadReport(worker_id=A, running=running, waiting=waiting, kv_usage=kv_usage, ts=ts)


def test_request_life_cycle():
    t = LoadTracker(16, Clock())
    t.start(RequestId("r1"), A, prompt_tokens=100, uncached_tokens=68)
    assert t.view(A).prefill_tokens == 68 and t.view(A).decode_blocks == 7 and t.view(A).requests == 1
    t.prefill_done(RequestId("r1"))
    t.prefill_done(RequestId("r1"))  # idempotent
    assert t.view(A).prefill_tokens == 0 and t.view(A).decode_blocks == 7
    t.finish(RequestId("r1"))
    t.finish(RequestId("r1"))  # unknown now: ignored
    assert t.view(A) == t.view(WorkerId("never-seen"))
    assert t.in_flight() == 0


def test_finish_without_prefill_done_releases_both():
    t = LoadTracker(16, Clock())
    t.start(RequestId("r"), A, 32, 32)
    t.finish(RequestId("r"))
    assert (t.view(A).prefill_tokens, t.view(A).decode_blocks) == (0, 0)


def test_duplicate_request_id_rejected():
    t = LoadTracker(16, Clock())
    t.start(RequestId("r"), A, 32, 32)
    with pytest.raises(ValueError):
        t.start(RequestId("r"), A, 32, 32)


def test_report_adds_what_the_router_does_not_see():
    clock = Clock()
    t = LoadTracker(16, clock, report_ttl_s=5.0, default_prefill_tokens=100)
    t.set_capacity(A, 1000)
    t.start(RequestId("r"), A, prompt_tokens=160, uncached_tokens=160)  # 10 blocks, 1 prefilling
    t.update(report(waiting=3, kv_usage=0.05))  # 50 blocks in use, 3 waiting
    v = t.view(A)
    assert v.decode_blocks == pytest.approx(50)  # 10 own + 40 foreign
    assert v.prefill_tokens == pytest.approx(160 + 2 * 160)  # 2 foreign waiting x mean own uncached
    clock.now = 6.0  # the report is stale: own figures only
    assert t.view(A).decode_blocks == 10


def test_report_below_own_estimate_never_subtracts():
    t = LoadTracker(16, Clock())
    t.set_capacity(A, 1000)
    t.start(RequestId("r"), A, 1600, 0)
    t.update(report(kv_usage=0.01))  # 10 blocks < own 100
    assert t.view(A).decode_blocks == 100


def test_unknown_capacity_means_no_decode_correction_and_old_reports_ignored():
    t = LoadTracker(16, Clock(), default_prefill_tokens=100)
    t.update(report(waiting=2, kv_usage=0.9, ts=5.0))
    assert t.view(A).decode_blocks == 0 and t.view(A).prefill_tokens == 200
    t.update(report(waiting=0, ts=4.0))  # older than the last one
    assert t.view(A).prefill_tokens == 200


def test_remove_worker_forgets_it():
    t = LoadTracker(16, Clock())
    t.start(RequestId("r"), A, 32, 32)
    t.remove_worker(A)
    t.finish(RequestId("r"))  # no error, no negative load resurrected
    assert t.view(A).decode_blocks == 0


def test_a_request_prefilled_elsewhere_and_waiting_for_its_kv_is_not_foreign_prefill():
    """A decode engine counts a request as waiting until its KV has arrived from the prefill worker;
    the router already knows that request, and it queues no prefill there."""
    t = LoadTracker(16, Clock(), default_prefill_tokens=100)
    t.start(RequestId("r"), A, prompt_tokens=160, uncached_tokens=160)
    t.prefilled_elsewhere(RequestId("r"))
    t.prefilled_elsewhere(RequestId("r"))  # idempotent
    t.update(report(waiting=1, ts=1.0))  # the engine: 1 waiting (for its KV)
    v = t.view(A)
    assert (v.prefill_tokens, v.prefilling, v.requests) == (0, 0, 1)
    t.prefill_done(RequestId("r"))  # its first token: no longer waiting there
    t.update(report(waiting=1, ts=2.0))  # now 1 waiting that no known router sent
    assert t.view(A).prefill_tokens == pytest.approx(160) and t.view(A).prefilling == 1
    t.finish(RequestId("r"))
    assert t.own_loads() == {}


def test_what_peers_are_told_includes_requests_waiting_for_kv():
    t = LoadTracker(16, Clock())
    t.start(RequestId("local"), A, 32, 32)
    t.start(RequestId("remote"), A, 32, 32)
    t.prefilled_elsewhere(RequestId("remote"))
    load = t.own_loads()[A]
    assert (load.prefill_tokens, load.prefilling, load.awaiting) == (32, 1, 2)
    other = LoadTracker(16, Clock())
    other.update_peer("p", 1.0, {A: load})
    other.update(report(waiting=2))  # both of the peer's requests: nothing foreign
    assert other.view(A).prefill_tokens == 32
