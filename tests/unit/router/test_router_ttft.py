"""The ttft mode: its learnt model converges, and its choices home, replicate and guard as documented."""

import heapq
import random
import statistics

import pytest

from dynamo_lite.protocol import RequestId, WorkerId
from router import Router, RouterConfig, RouterMode, Seed
from router.ttft import Rls, features

BS = 16
A, B, C = WorkerId("a"), WorkerId("b"), WorkerId("c")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def make(capacity: int = 0, clock: Clock | None = None, **kw) -> Router:
    r = Router(RouterConfig(block_size=BS, mode=RouterMode.TTFT, **kw), clock=clock or Clock(), rng=random.Random(0))
    for w in (A, B, C):
        r.add_worker(w, capacity)
    return r


def store(r: Router, engine_factory, w: WorkerId, tokens: list[int], salt: int = 7) -> None:
    eng = engine_factory(BS, salt)
    seq, batch = eng.batch(eng.prefill(tokens))
    r.apply_events(w, seq, batch)


def test_rls_recovers_known_coefficients():
    rng = random.Random(3)
    model = Rls([0.0, 0.0, 0.0], prior_var=10.0, forget=1.0)
    for _ in range(300):
        x = [1.0, rng.uniform(0, 8), rng.uniform(0, 3)]
        model.update(x, 0.01 + 0.05 * x[1] + 0.002 * x[2])
    assert model.theta == pytest.approx([0.01, 0.05, 0.002], abs=1e-4)


def test_a_feature_unseen_for_long_does_not_swing_the_fit_on_its_first_sample():
    model = Rls([0.01, 0.05, 0.0], prior_var=1.0, forget=0.995)
    for i in range(3000):  # the third feature stays 0: its variance would grow by 1/0.995 per update
        x = [1.0, (i % 10) / 2]
        model.update([*x, 0.0], 0.01 + 0.05 * x[1])
    before = list(model.theta)
    model.update([1.0, 2.0, 0.01], 0.01 + 0.05 * 2.0 + 0.5)  # one noisy sample with it non-zero
    assert model.theta[:2] == pytest.approx(before[:2], abs=0.02)
    assert abs(model.theta[2]) < 5  # about 0.5 with the cap; about 50 (the whole error on it) without


def test_the_fit_stays_sound_over_many_first_tokens_of_mixed_lengths():
    """Features at scales from 1e-3 to 1e3 (short prompts beside 60k-token ones): the textbook update
    lost P's positive definiteness here after 5,700-6,400 updates and the coefficients ran to -1e4
    (seen after ~5,000 first tokens of a 4x trace in the planner simulation)."""
    rng = random.Random(0)
    truth = (0.004, 0.027, 0.01, 0.0008, 0.0, 0.01)
    model = Rls((0.005, 0.03, 0.0, 0.0, 0.0, 0.0), prior_var=1.0)
    for _ in range(10_000):
        prompt = int(rng.uniform(5000, 60000) if rng.random() < 0.11 else rng.uniform(50, 500))
        uncached = prompt - int(prompt * rng.choice((0.0, 0.0, 0.5, 0.9)))
        queued = rng.uniform(0, 20000) if rng.random() < 0.25 else 0.0
        x = features(queued, uncached, prompt, rng.uniform(0, 0.3), rng.choice((0, 0, 1, 2)))
        model.update(x, sum(t * v for t, v in zip(truth, x)) * rng.uniform(0.8, 1.25))
    assert all(model._p[i][i] > 0 for i in range(6))
    assert model.theta[1] == pytest.approx(0.027 * 1.025, rel=0.15)  # the noise's mean is 1.025
    assert max(abs(t) for t in model.theta) < 0.1


def test_seed_is_the_line_through_a_profile():
    seed = Seed.from_profile([(1000, 0.03), (2000, 0.05), (4000, 0.09)])
    assert (seed.base_s, seed.per_1k_tokens_s) == pytest.approx((0.01, 0.02))
    with pytest.raises(ValueError):
        Seed.from_profile([(1000, 0.03)])


def service_s(uncached: int, prompt: int) -> float:
    """The known speed of the simulated engine: 8 ms + 40 ms per 1k tokens + an attention term."""
    return 0.008 + 0.04 * uncached / 1000 + 0.01 * uncached * (prompt - uncached + uncached / 2) / 1e6


def replay_fifo(rate: float, n: int = 600, seed: int = 1) -> tuple[list[tuple[float, float]], Router]:
    """Poisson arrivals over two FIFO prefill servers of known speed, routed and taught by a ttft router
    seeded 5x too slow. Returns (predicted, measured) TTFT per request."""
    clock = Clock()
    wrong = Seed(base_s=0.04, per_1k_tokens_s=0.2)
    r = Router(RouterConfig(block_size=BS, mode=RouterMode.TTFT, ttft_seed=wrong), clock=clock, rng=random.Random(0))
    workers = [A, B]
    for w in workers:
        r.add_worker(w)
    rng = random.Random(seed)
    free = dict.fromkeys(workers, 0.0)
    due: list[tuple[float, int, RequestId]] = []
    out, t = [], 0.0
    for i in range(n):
        t += rng.expovariate(rate)
        while due and due[0][0] <= t:  # first tokens that came before this arrival
            clock.now, _, done = heapq.heappop(due)
            r.on_prefill_done(done)
            r.on_request_finish(done)
        clock.now = t
        tokens = [rng.randrange(50_000) for _ in range(rng.randint(200, 4000))]
        d = r.route(tokens, workers)
        rid = RequestId(f"r{i}")
        r.on_request_start(rid, d)
        first = max(t, free[d.worker_id]) + service_s(d.uncached_tokens, len(tokens))
        free[d.worker_id] = first
        heapq.heappush(due, (first, i, rid))
        out.append((d.predicted_ttft_s, first - t))
    return out, r


@pytest.mark.parametrize("rate", [5.0, 20.0, 40.0])  # about 22%, 90% and saturated load
def test_predicted_ttft_converges_to_the_measured(rate):
    pairs, router = replay_fifo(rate)
    last = pairs[-200:]
    errors = [abs(p - m) / m for p, m in last]
    assert statistics.median(errors) < 0.10
    assert sum(p for p, _ in last) / sum(m for _, m in last) == pytest.approx(1.0, abs=0.10)
    assert router.ttft_model.ttft.updates == len(pairs) - router.ttft_model.in_flight()
    # it started from a wrong seed, not from the answer
    (p0, m0) = pairs[0]
    assert p0 / m0 > 3


def test_unmeasured_first_tokens_teach_nothing():
    clock = Clock()
    r = make(clock=clock)
    d = r.route(list(range(160)), [A, B])
    r.on_request_start(RequestId("whole"), d)
    clock.now = 5.0
    r.on_prefill_done(RequestId("whole"), measured=False)
    r.on_request_finish(RequestId("whole"), 10)
    assert r.ttft_model.ttft.updates == 0 and r.ttft_model.itl.updates == 0 and r.ttft_model.in_flight() == 0


def busy_home(engine_factory, copy_weight: float = 1.0, others_full: bool = True) -> Router:
    """A holds a 100-block prefix and has 2,000 tokens queued (more than the prefix); B and C are idle,
    full of other blocks when ``others_full``."""
    r = make(capacity=200, copy_weight=copy_weight)
    store(r, engine_factory, A, list(range(1600)))
    r.on_request_start(RequestId("busy"), r.route(list(range(10_000, 10_000 + 2000)), [A]))
    if others_full:
        store(r, engine_factory, B, list(range(50_000, 50_000 + 3200)))
        store(r, engine_factory, C, list(range(60_000, 60_000 + 3200)))
    return r


def test_a_busy_home_keeps_its_prefix_when_others_caches_are_full(engine_factory):
    prompt = [*range(1600), 1, 2]
    # B and C empty: they compute the prefix again with no eviction, and win on queue alone.
    assert busy_home(engine_factory, others_full=False).route(prompt, [A, B, C]).worker_id in (B, C)
    # B and C full of other blocks: a copy there evicts, and its price sends the request home.
    d = busy_home(engine_factory).route(prompt, [A, B, C])
    assert d.worker_id == A
    assert all(s.ttft is not None and s.ttft.copy_s > 0 for s in d.scores if s.worker_id != A)
    # With no price on copies, the same state replicates the prefix.
    assert busy_home(engine_factory, copy_weight=0.0).route(prompt, [A, B, C]).worker_id != A


def test_the_inlined_scoring_matches_the_model(engine_factory):
    """score_ttft inlines `features` and the model's dot product for speed: both must agree with them."""
    r = busy_home(engine_factory)
    rng = random.Random(2)
    for i in range(40):  # teach it something, so every coefficient is non-zero
        x = (1.0, rng.uniform(0, 5), rng.uniform(0, 4), rng.uniform(0, 3), rng.uniform(0, 0.5), rng.randint(0, 3))
        r.ttft_model.ttft.update(x, 0.01 + 0.02 * x[1] + 0.005 * x[2] + 0.003 * x[3] + 0.1 * x[4] + 0.004 * x[5])
    prompt = [*range(1600), 1, 2]
    for s in r.route(prompt, [A, B, C]).scores:
        load = r.load_of(s.worker_id)
        uncached = len(prompt) - s.overlap_blocks * BS
        x = features(load.prefill_tokens, uncached, len(prompt), s.ttft.kv_fill, load.prefilling)
        assert s.ttft.x == pytest.approx(x)
        assert s.ttft.predicted_s == pytest.approx(max(0.0, r.ttft_model.ttft.predict(x)))
        # The copy price: what computing again the blocks A holds adds to the prediction here (tokens and
        # attention), times copy_weight (1 in busy_home) and the cache's fill (B and C are full).
        held = features(load.prefill_tokens, len(prompt) - 100 * BS, len(prompt), s.ttft.kv_fill, load.prefilling)
        recompute = r.ttft_model.ttft.predict(x) - r.ttft_model.ttft.predict(held)
        assert s.ttft.copy_s == pytest.approx(recompute if s.worker_id != A else 0.0)
        assert s.worker_id == A or recompute > 0.02  # 1,600 tokens more and their attention


def test_a_hot_prefix_is_replicated_when_its_home_is_far_behind(engine_factory):
    prefix = list(range(1600))
    prompt = [*prefix, 1, 2]

    def home_behind_by(queued: int, **kw) -> Router:
        """A holds the prefix and has ``queued`` long prompts waiting; B is idle and full (a copy has a price)."""
        r = make(capacity=200, **kw)
        store(r, engine_factory, A, prefix)
        store(r, engine_factory, B, list(range(50_000, 50_000 + 3200)))
        for i in range(queued):
            tokens = list(range(100_000 * (i + 1), 100_000 * (i + 1) + 3000))
            r.on_request_start(RequestId(f"q{i}"), r.route(tokens, [A]))
        return r

    # Six long prompts queued at home pay for a copy at 4x its recompute, not at the default's 16x...
    assert home_behind_by(6, copy_weight=4.0).route(prompt, [A, B]).worker_id == B
    assert home_behind_by(6).route(prompt, [A, B]).worker_id == A
    # ... thirty do: a hot prefix whose home is far behind is replicated.
    d = home_behind_by(30).route(prompt, [A, B])
    assert d.worker_id == B and d.ttft is not None and d.ttft.copy_s > 0


def test_cold_prompts_spread_over_idle_workers():
    r = make()
    chosen = set()
    for i in range(3):
        d = r.route(list(range(1000 * i, 1000 * i + 800)), [A, B, C])
        r.on_request_start(RequestId(f"c{i}"), d)
        chosen.add(d.worker_id)
    assert chosen == {A, B, C}


def test_the_itl_guard_passes_over_a_worker_that_would_break_the_target(engine_factory):
    clock = Clock()
    r = make(capacity=100, clock=clock, itl_target_s=0.05)
    model = r.ttft_model
    for fill in (0.1, 0.3, 0.5, 0.7, 0.9) * 11:  # ITL = 10 ms + 80 ms x KV fill: 50 ms at half full
        model.learn_itl(fill, 0.01 + 0.08 * fill)
        assert not r.route_hashes([], 16, [A]).ttft.itl_guard or model.itl_ready  # silent for 50 streams
    prefix = list(range(320))
    store(r, engine_factory, A, prefix)
    for i in range(4):  # 4 x 16 blocks held on A by requests decoding there: A would be 85% full
        r.on_request_start(RequestId(f"d{i}"), r.route_hashes([], 256, [A]))
        r.on_prefill_done(RequestId(f"d{i}"), measured=False)
    unguarded = make(capacity=100, clock=clock)
    store(unguarded, engine_factory, A, prefix)
    for i in range(4):
        unguarded.on_request_start(RequestId(f"d{i}"), unguarded.route_hashes([], 256, [A]))
        unguarded.on_prefill_done(RequestId(f"d{i}"), measured=False)
    assert unguarded.route([*prefix, 5], [A, B]).worker_id == A  # the prefix wins without the guard
    d = r.route([*prefix, 5], [A, B])
    assert d.worker_id == B
    assert next(s for s in d.scores if s.worker_id == A).ttft.itl_guard
    # with every candidate over the target, the guard changes nothing: lowest predicted TTFT wins
    assert r.route([*prefix, 5], [A]).worker_id == A


def test_an_itl_fit_that_falls_with_load_does_not_send_everything_to_the_busiest_worker():
    """Under overload the ITL fit can fall with KV fill: a request sent to a long queue decodes after the
    crush. The guard then passed over every idle worker and sent each request to the busiest one (in
    the arena's simulation at 30x the tenants trace's load: half the fleet idle, TTFT p99 15 s)."""
    clock = Clock()
    r = make(capacity=100, clock=clock, itl_target_s=0.05)
    for fill in (0.1, 1.0, 3.0, 6.0, 10.0) * 11:  # ITL 80 ms when idle, 30 ms at ten times full
        r.ttft_model.learn_itl(fill, 0.08 - 0.005 * fill)
    assert r.ttft_model.itl.theta[1] < 0 and r.ttft_model.itl_ready
    for i in range(8):  # A: 8 x 64 blocks sent and not finished, over five times its capacity
        r.on_request_start(RequestId(f"q{i}"), r.route_hashes([], 1024, [A]))
    assert r.ttft_model.predict_itl(5.0) == pytest.approx(r.ttft_model.predict_itl(0.0))
    d = r.route(list(range(64)), [A, B])
    assert d.worker_id == B
    assert {s.ttft.itl_guard for s in d.scores} == {True}  # every candidate or none: the guard cannot choose


@pytest.mark.parametrize("theta", [
    (0.02, 0.03, 0.0, -0.5, 0.0, 0.0),  # attention priced below 0 (a fit under overload: chat at 40x its load)
    (0.02, -0.01, 0.0, 0.002, 0.0, 0.0),  # more tokens to compute predicted faster (t1 + t2 * kv_fill < 0)
])
def test_a_fit_that_prices_computing_below_zero_still_sends_a_prompt_to_its_prefix(engine_factory, theta):
    r = make(capacity=1000)
    prefix = list(range(1600))
    store(r, engine_factory, A, prefix)
    r.ttft_model.ttft.theta = list(theta)
    d = r.route([*prefix, 5], [A, B])
    assert d.worker_id == A
    miss = next(s for s in d.scores if s.worker_id == B).ttft
    assert miss.predicted_s >= next(s for s in d.scores if s.worker_id == A).ttft.predicted_s
    # the idle worker's prediction (the frontend's local-or-remote prefill choice) counts them so too
    assert r.prefill_seconds(1600) == pytest.approx(0.02 + max(0.0, theta[1]) * 1.6 + max(0.0, theta[3]) * 1.28)


def test_itl_is_learnt_from_streamed_requests():
    clock = Clock()
    r = make(capacity=100, clock=clock)
    d = r.route(list(range(160)), [A])
    r.on_request_start(RequestId("s"), d)
    clock.now = 0.1
    r.on_prefill_done(RequestId("s"))
    clock.now = 0.1 + 0.02 * 9
    r.on_request_finish(RequestId("s"), 10)
    assert r.ttft_model.itl.updates == 1 and r.ttft_model.ttft.updates == 1


def test_kv_is_the_old_name_of_blocks_and_only_ttft_predicts():
    assert RouterMode("kv") is RouterMode.BLOCKS
    blocks = Router(RouterConfig(block_size=BS, mode="kv"))
    assert blocks.config.mode is RouterMode.BLOCKS
    assert blocks.route(list(range(64)), [A]).predicted_ttft_s is None
    assert blocks.prefill_seconds(1000) is None
    ttft = make()
    assert ttft.prefill_seconds(2000) == pytest.approx(0.02 + 0.03 * 2 + 0.0)  # the seed, no attention yet
    # what the prompt's compute adds to the steps that carry it (the decode guard's stall): no fixed term
    assert ttft.prefill_seconds(2000, fixed=False) == pytest.approx(0.03 * 2)
    assert ttft.route(list(range(64)), [A]).predicted_ttft_s == pytest.approx(0.02 + 0.03 * 0.064)


def test_the_itl_model_does_not_extrapolate_beyond_the_fills_it_saw():
    r = make(capacity=100)
    for _ in range(60):  # a narrow band of fills with a steep local slope
        r.ttft_model.learn_itl(0.20, 0.010)
        r.ttft_model.learn_itl(0.25, 0.020)
    assert r.ttft_model.predict_itl(0.9) == pytest.approx(r.ttft_model.predict_itl(0.25))
    assert r.ttft_model.predict_itl(0.9) < 0.03


def test_a_prompt_just_sent_counts_as_cached_there_until_its_events_come():
    clock = Clock()
    shared = list(range(800))  # 50 blocks, not yet reported by any engine
    for ttl, home in ((10.0, True), (0.0, False)):
        r = make(clock=clock, inflight_ttl_s=ttl)
        first = r.route([*shared, 1], [A, B, C])
        r.on_request_start(RequestId("first"), first)
        r.on_prefill_done(RequestId("first"))  # done: its queue no longer weighs on the worker
        second = r.route([*shared, 2], [A, B, C])
        assert second.overlap_blocks == (50 if home else 0)
        assert second.promised_tokens == second.overlap_tokens  # none of it confirmed by an event
        assert second.confirmed_uncached_tokens == 801
        if home:
            assert second.worker_id == first.worker_id
    clock.now = 11.0  # past the TTL, with no event to confirm it: the claim is gone
    r = make(clock=clock, inflight_ttl_s=10.0)
    clock.now = 0.0
    r.on_request_start(RequestId("x"), r.route([*shared, 1], [A, B, C]))
    clock.now = 11.0
    assert r.route([*shared, 2], [A, B, C]).overlap_blocks == 0


def _decoding(r: Router, w: WorkerId, rid: str) -> None:
    """One request on ``w`` that has had its first token: it only decodes now."""
    r.on_request_start(RequestId(rid), r.route(list(range(5000, 5400)), [w]))
    r.on_prefill_done(RequestId(rid), measured=False)


def test_a_decoding_stream_sends_the_next_request_to_an_idle_worker():
    """At the seed the decode terms are 0, so the predictions tie exactly: the load breaks the tie."""
    r = make(capacity=1000)
    _decoding(r, A, "s1")
    for i in range(20):
        assert r.route(list(range(100 * i, 100 * i + 300)), [A, B]).worker_id == B


def test_a_fit_that_finds_load_speeds_prefill_up_does_not_steer_onto_busy_workers():
    r = make(capacity=1000)
    r.ttft_model.ttft.theta[2] = -0.5  # decode interference fitted negative, as noise can do
    r.ttft_model.ttft.theta[5] = -0.01  # and a request ahead
    _decoding(r, A, "s1")
    r.on_request_start(RequestId("s2"), r.route(list(range(9000, 9300)), [A]))  # prefilling on A
    d = r.route(list(range(300)), [A, B])
    assert d.worker_id == B
    busy = next(s for s in d.scores if s.worker_id == A)
    assert busy.ttft is not None and busy.ttft.predicted_s >= d.ttft.predicted_s


def test_a_decision_explains_every_candidate_chosen_first():
    r = Router(RouterConfig(block_size=16, mode=RouterMode.TTFT), rng=random.Random(0))
    for w in ("a", "b"):
        r.add_worker(w, 100)
    d = r.route(list(range(100)), ["a", "b"])
    first, second = d.explain().split("; ")
    assert first.startswith(f"{d.worker_id}: 0 blocks cached, 6 to prefill there, predicted TTFT ")
    assert second.startswith("b: " if d.worker_id == "a" else "a: ") and "+ copy 0.0 ms" in second
    blocks = Router(RouterConfig(block_size=16)).route(list(range(100)), ["a"])
    assert blocks.explain() == "a: 0 blocks cached, 6 to prefill there, cost 13.2"
