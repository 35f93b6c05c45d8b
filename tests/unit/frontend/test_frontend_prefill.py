"""Where prefill runs under the predicted rule, on fake workers and a fake prefill queue: the threshold
bootstraps it, the timings it learns are the frontend's own, and a slow remote path keeps prefill local."""

from __future__ import annotations

from dynamo_lite.frontend.app import STATE
from dynamo_lite.protocol import Role
from tests.unit.frontend.conftest import Harness, Script, pieces

LONG = list(range(1, 41))


async def send(h: Harness, prompt: list[int], stream: bool = True) -> None:
    resp = await h.client.post("/v1/completions", json={"model": "m", "prompt": prompt, "max_tokens": 2,
                                                        "stream": stream})  # fmt: skip
    assert resp.status == 200, await resp.text()
    await resp.read()


async def reasons(h: Harness) -> dict[str, float]:
    names = ("remote", "predicted_local", "short_prompt", "queue_full")
    return {r: await h.metric("dynamo_lite_frontend_disaggregation_decisions_total", reason=r) for r in names}


async def test_the_predicted_rule_learns_from_a_remote_prefill_then_keeps_a_slow_path_local(harness) -> None:
    h = await harness(disaggregation={"decision": "predicted", "max_local_prefill_tokens": 8})
    h.add_worker("d0", script=Script(pieces(2)))
    h.add_worker("p0", Role.PREFILL)
    placer = h.app[STATE].flow.placer
    await send(h, LONG)  # nothing timed yet: the threshold rule, remote
    assert h.submitter.jobs == [LONG] and h.engines.calls[-1]["kv"] == {"do_remote_prefill": True}
    timings = placer.timings["m"]
    assert timings.ready and timings.overhead_s is not None and timings.overhead_s >= 0
    assert timings.first_token_s is not None and timings.first_token_s > 0 and timings.job_s is not None
    timings.first_token_s = 100.0  # a KV transfer that slow never beats local prefill
    h.submitter.pending = 1
    await send(h, [t + 100 for t in LONG])  # a new prompt: LONG's blocks are only promised on d0 (just sent)
    assert h.submitter.jobs == [LONG] and h.engines.calls[-1]["kv"] is None
    assert await reasons(h) == {"remote": 1, "predicted_local": 1, "short_prompt": 0, "queue_full": 0}


async def test_a_whole_answer_teaches_no_transfer_time(harness) -> None:
    h = await harness(disaggregation={"decision": "predicted", "max_local_prefill_tokens": 8})
    h.add_worker("d0", script=Script(pieces(2)))
    h.add_worker("p0", Role.PREFILL)
    await send(h, LONG, stream=False)  # its first output is the whole answer: no first token to time
    timings = h.app[STATE].flow.placer.timings["m"]
    assert timings.overhead_s is not None and timings.first_token_s is None and not timings.ready
    await send(h, LONG, stream=False)  # still the threshold rule
    assert len(h.submitter.jobs) == 2


async def test_the_threshold_rule_sends_the_same_request_remote(harness) -> None:
    """Also when the first was sent moments ago: the router counts its blocks cached on d0 (a promise, no KV
    event yet), but where prefill runs is decided on the blocks confirmed."""
    h = await harness(disaggregation={"decision": "threshold", "max_local_prefill_tokens": 8})
    h.add_worker("d0", script=Script(pieces(2)))
    h.add_worker("p0", Role.PREFILL)
    await send(h, LONG)
    h.app[STATE].flow.placer.timings["m"].first_token_s = 100.0
    await send(h, LONG)
    assert h.submitter.jobs == [LONG, LONG]
    assert await reasons(h) == {"remote": 2, "predicted_local": 0, "short_prompt": 0, "queue_full": 0}
