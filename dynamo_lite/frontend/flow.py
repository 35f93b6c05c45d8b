"""The life of one request after validation: route, decide where prefill runs, stream
from the decode worker, and move the request to another worker if its worker fails.

`RequestFlow.run(request, whole)` is an async generator of output `Piece`s that ends
with one `Outcome` (tokens, cached tokens, workers, migrations). With `whole` (a client
that wants one JSON answer) the engine is asked for one answer too, and a worker that
fails is replaced by resending the whole request (nothing was passed on yet); TTFT and
ITL are not observed for those (the frontend does not see the first token), and the SLO
counter holds their duration to TTFT target + ITL target per further token.

Where prefill runs is the placer's (prefill.py). With `reject_ttft_s`, a request whose first
attempt is predicted (the placement's path) to reach its first token later than that is refused
(`Overloaded`) before any engine sees it; a migrated attempt never is.

What goes wrong is a `RequestFailed` (request.py) that names what happened (no worker, migrations
exhausted, worker timed out, engine refused, overloaded); the HTTP layer gives it a status,
or, after the first piece, an SSE error event. Closing the generator (client
gone) closes the engine connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

from dynamo_lite.frontend.disagg import DisaggPolicy, Placement, Reason
from dynamo_lite.frontend.fleet import Fleet
from dynamo_lite.frontend.metrics import FrontendMetrics, ModelMetrics
from dynamo_lite.frontend.prefill import PrefillPlacer
from dynamo_lite.frontend.request import (
    EngineRefused,
    GenerationRequest,
    MigrationsExhausted,
    NoWorker,
    Outcome,
    Overloaded,
    Piece,
    WorkerTimedOut,
)
from dynamo_lite.frontend.upstream import (
    EngineClient,
    StreamUsage,
    UpstreamRejected,
    UpstreamTimeout,
    WorkerFailed,
)
from dynamo_lite.protocol import (
    KvTransferParams,
    RequestId,
    WorkerId,
    WorkerRecord,
)
from dynamo_lite.queue import PrefillSubmitter

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FlowSettings:
    disagg: DisaggPolicy
    prefill_timeout_s: float
    max_migrations: int
    ttft_target_s: float  # SLO for the goodput counter (planner.ttft_target_ms)
    itl_target_s: float  # ... and planner.itl_target_ms
    suspect_s: float  # how long a worker that failed a request is avoided (the lease TTL is the most needed)
    reject_ttft_s: float | None = None  # refuse (429) a request predicted to reach its first token later than this


class RequestFlow:
    def __init__(self, fleet: Fleet, engines: EngineClient, submitter: PrefillSubmitter | None,
                 metrics: FrontendMetrics, settings: FlowSettings) -> None:
        self.fleet = fleet
        self.engines = engines
        self.submitter = submitter
        self.metrics = metrics
        self.settings = settings
        self.placer = PrefillPlacer(submitter, settings.disagg, settings.prefill_timeout_s)

    def flows(self, reqs: list[GenerationRequest], whole: bool) -> list[AsyncIterator[Piece | Outcome]]:
        """One flow per choice. The choices of a beam search (`n` consecutive ones per prompt) share one."""
        n = reqs[0].sampling.n if reqs[0].sampling.use_beam_search else None
        if not n:
            return [self.run(r, whole) for r in reqs]
        return [flow for i in range(0, len(reqs), n) for flow in self._beams(reqs[i:i + n])]

    def _beams(self, reqs: list[GenerationRequest]) -> list[AsyncIterator[Piece | Outcome]]:
        """The choices of one beam search (`use_beam_search`, `n` beams): the first choice's request, sent once
        (routed and migrated as any other), is answered by vLLM's own beam search on the engine with every beam,
        best first. The first choice's flow runs it and hands each other choice its beam."""
        answer: asyncio.Future[tuple[dict[int, Piece], Outcome]] = asyncio.get_running_loop().create_future()

        async def lead() -> AsyncIterator[Piece | Outcome]:
            pieces: dict[int, Piece] = {}
            try:
                async for event in self.run(reqs[0], whole=True):
                    if isinstance(event, Outcome):
                        answer.set_result((pieces, event))
                    else:
                        pieces[event.index] = event
            finally:
                if not answer.done():  # failed or closed: the other choices end with it
                    answer.cancel()
            async for event in beam(0):
                yield event

        async def beam(i: int) -> AsyncIterator[Piece | Outcome]:
            pieces, outcome = await answer
            piece = pieces.get(i, Piece("", [], outcome.finish_reason))  # (fewer beams: a vocabulary under 2n)
            ids = piece.token_ids if piece.token_ids is not None else reqs[i].retokenize(piece.text)
            yield piece
            yield replace(outcome, completion_tokens=len(ids), finish_reason=piece.finish_reason,
                          stop_reason=piece.stop_reason)

        return [lead(), *(beam(i) for i in range(1, len(reqs)))]

    async def run(self, req: GenerationRequest, whole: bool = False) -> AsyncIterator[Piece | Outcome]:
        fleet = self.fleet.get(req.model)
        mm = self.metrics.for_model(req.model)
        beam = bool(req.sampling.use_beam_search)  # the engine answers a beam search whole (as vLLM does)
        whole = beam or (whole and not req.sampling.echo)  # prompt logprobs are read from a stream's first chunk
        generated: list[int] = []
        failed: set[WorkerId] = set()
        workers: list[WorkerId] = []
        migrations = 0
        finish_reason: str | None = None
        stop_reason: int | str | None = None
        echo_pending = req.prompt_logprobs  # until the prompt's logprobs came (in the first piece)
        timing = _TokenTiming(req.arrival, mm, whole)
        while True:
            candidates = fleet.candidates(exclude=failed) if fleet is not None else []
            if fleet is None or not candidates:
                raise NoWorker(f"No worker is available for model `{req.model}`" +
                               (" (every worker tried has failed)." if failed else "."))
            prompt = req.prompt_ids + generated
            started = time.perf_counter()
            decision = fleet.router.route(prompt, candidates)
            mm.router_decision.observe(time.perf_counter() - started)
            if log.isEnabledFor(logging.DEBUG):
                log.debug("request %s routed: %s", req.request_id, decision.explain())
            # What the KV events said apart from what prompts just sent only promise: the first is what an
            # operator compares with the engines' cached tokens to see whether the index follows them.
            confirmed = decision.overlap_tokens - decision.promised_tokens
            mm.routed_overlap_ratio.observe(confirmed / len(prompt))
            worker = fleet.workers[decision.worker_id]
            mm.routed(worker.worker_id, decision.mode.value).inc()
            mm.routed_overlap.inc(confirmed)
            mm.routed_promised.inc(decision.promised_tokens)
            # Prompt logprobs need the prompt computed where the request runs, not shipped as KV; a beam search
            # sends the engine one request per beam and step, each a prefill of its own there.
            placement = None if req.prompt_logprobs or beam else await self.placer.place(req, mm, fleet, worker,
                                                                                         decision, prompt)  # fmt: skip
            if not workers and self.settings.reject_ttft_s is not None:  # admission by prediction, once
                self._admit(req, mm, placement.predicted_ttft_s if placement else decision.predicted_ttft_s)
            kv_params = await self._prefill(req, mm, worker, placement, prompt) if placement else None
            sampling = req.sampling if not workers else req.sampling.resumed(len(generated), echo_pending)
            attempt = RequestId(f"{req.request_id}#{len(workers)}")
            workers.append(worker.worker_id)
            usage = StreamUsage()
            sent = time.monotonic()
            before = len(generated)
            # The router learns TTFT/ITL only from real first tokens of a prefill on that worker.
            measured = not whole and kv_params is None
            predicted = decision.predicted_ttft_s if measured else None  # ttft mode: judged at the first token
            fleet.router.on_request_start(attempt, decision)
            if kv_params is not None:  # prefilled elsewhere: no prefill work queues on this worker
                fleet.router.on_prefilled_elsewhere(attempt)
            pieces = self.engines.stream(worker, req.request_id, req.model, prompt, req.max_tokens - len(generated),
                                         sampling, kv_params, usage, whole)  # fmt: skip
            if beam:  # every beam or none: a search that fails is sent again whole, never resumed from its beams
                pieces = _all_or_none(pieces)
            try:
                async for piece in pieces:
                    ids = piece.token_ids if piece.token_ids is not None else req.retokenize(piece.text)
                    if (ids or piece.text) and timing.output(len(ids)):
                        fleet.router.on_prefill_done(attempt, measured)
                        if predicted:
                            mm.ttft_prediction.observe((time.monotonic() - sent) / predicted)
                        if kv_params is not None and not whole:  # remote prefill: its transfer, timed
                            self.placer.first_token(req.model, time.monotonic() - sent)
                    generated.extend(ids)
                    if piece.finish_reason is not None:
                        finish_reason, stop_reason = piece.finish_reason, piece.stop_reason
                    if piece.prompt_logprobs is not None:
                        echo_pending = False
                    yield piece
                # The engine's count where it reports one (vLLM with --enable-prompt-tokens-details,
                # the mock), else the router's estimate; after a migration, the last worker's. vLLM's beam
                # search reports none, and nor does its answer here.
                cached = usage.cached_tokens if usage.cached_tokens is not None else \
                    None if beam else decision.overlap_tokens
                met = timing.within(self.settings.ttft_target_s, self.settings.itl_target_s)
                mm.slo[met].inc()
                yield Outcome(len(generated), None if cached is None else min(cached, len(req.prompt_ids)),
                              finish_reason, tuple(workers), migrations, stop_reason)
                return
            except (WorkerFailed, UpstreamTimeout) as e:
                # A worker that stopped answering (frozen, partitioned) is failed for this request too.
                timed_out = isinstance(e, UpstreamTimeout)
                failed.add(worker.worker_id)
                fleet.suspect(worker.worker_id, self.settings.suspect_s)
                if len(generated) >= req.max_tokens:  # it failed after the last token: nothing to resend
                    yield Piece("", [], "length")
                    yield Outcome(len(generated), 0, "length", tuple(workers), migrations)
                    return
                if timed_out and (migrations >= self.settings.max_migrations
                                  or not fleet.candidates(exclude=failed)):  # fmt: skip
                    raise WorkerTimedOut(f"The worker did not answer in time: {e}") from e
                if migrations >= self.settings.max_migrations:
                    raise MigrationsExhausted(f"Worker failed and the request was moved {migrations} time(s) "
                                              f"already: {e}") from e  # fmt: skip
                if not fleet.candidates(exclude=failed):
                    raise NoWorker(f"Worker failed and no other worker of model `{req.model}` is available: "
                                   f"{e}") from e  # fmt: skip
                migrations += 1
                stage = "mid_stream" if generated else "whole_request" if whole else "before_first_token"
                mm.migrations("timeout" if timed_out else stage).inc()
                log.warning("request %s: worker %s %s after %d tokens; migrating", req.request_id, worker.worker_id,
                            "timed out" if timed_out else f"failed ({e})", len(generated))
            except UpstreamRejected as e:
                raise EngineRefused(e.args[0], e.param) from e
            finally:
                fleet.router.on_request_finish(attempt, len(generated) - before if not whole else 0)

    def _admit(self, req: GenerationRequest, mm: ModelMetrics, predicted_s: float | None) -> None:
        """Refuse the request (429) when its predicted TTFT is over `reject_ttft_s`; nothing was sent yet.
        Its TTFT counts from its arrival: the time it already spent here (a wait for an admission slot, its
        tokenization, a frontend slow under a burst) is added to what the router predicts from now."""
        limit = self.settings.reject_ttft_s
        if predicted_s is None or limit is None:
            return
        predicted_s += time.monotonic() - req.arrival
        if predicted_s <= limit:
            return
        mm.refused("predicted_ttft").inc()
        retry = max(1, math.ceil(predicted_s - self.settings.ttft_target_s))
        log.info("request %s: refused, predicted TTFT %.3f s over %.3f s", req.request_id, predicted_s, limit)
        raise Overloaded(f"The service is overloaded: this request's predicted time to first token is "
                         f"{predicted_s:.2f} s, over the {limit:.2f} s admitted; retry in {retry} s.", retry)

    async def _prefill(self, req: GenerationRequest, mm: ModelMetrics, worker: WorkerRecord, placement: Placement,
                       prompt: list[int]) -> KvTransferParams | None:  # fmt: skip
        """Run prefill where `placement` says; returns the decode step's kv params (None: prefill there)."""
        params, reason = None, placement.reason
        if reason is Reason.REMOTE:
            params, reason = await self.placer.run(req, mm, worker, placement, prompt)
        mm.disagg(reason.value).inc()
        if placement.guarded:
            mm.decode_guard.inc()
        log.debug("request %s -> %s (prompt %d, prefill %s, predicted TTFT %s)", req.request_id, worker.worker_id,
                  len(prompt), reason.value, placement.predicted_ttft_s)
        return params


async def _all_or_none(pieces: AsyncIterator[Piece]) -> AsyncIterator[Piece]:
    """An answer's pieces once all have come: nothing of one that fails part way."""
    async with contextlib.aclosing(pieces) as answer:
        kept = [p async for p in answer]
    for piece in kept:
        yield piece


class _TokenTiming:
    """TTFT once per request (across migrations) and ITL per token, from output arrival times.

    A whole answer comes at once: its arrival is no first token, so nothing is observed, and
    `within` holds its duration to the targets a request meeting both would keep.
    """

    def __init__(self, arrival: float, mm: ModelMetrics, whole: bool = False) -> None:
        self.first: float | None = None
        self.last: float | None = None
        self.tokens = 0
        self.arrival = arrival
        self.ttft = mm.ttft
        self.itl = mm.itl
        self.whole = whole

    def output(self, tokens: int) -> bool:
        """Output arrived (`tokens` of it); True when it is the request's first."""
        now = time.monotonic()
        first = self.last is None
        self.tokens += tokens
        if first:
            self.first = now
            if not self.whole:
                self.ttft.observe(now - self.arrival)
        elif tokens and not self.whole:
            gap = (now - self.last) / tokens  # type: ignore[operator]
            for _ in range(tokens):
                self.itl.observe(gap)
        self.last = now
        return first

    def within(self, ttft_s: float, itl_s: float) -> bool:
        """Whether TTFT and the mean inter-token latency met their targets."""
        if self.first is None or self.last is None:
            return False
        if self.whole:
            return self.last - self.arrival <= ttft_s + itl_s * max(0, self.tokens - 1)
        mean_itl = (self.last - self.first) / (self.tokens - 1) if self.tokens > 1 else 0.0
        return self.first - self.arrival <= ttft_s and mean_itl <= itl_s
