"""What a request's TTFT would be on a simulated worker, if it were sent there now: the arena simulation's oracle.

The oracle router (`planner_sim_fleet.Fleet`, ``router="oracle"``) reads each candidate's scheduler as it is
and plays its passes forward with the mock's own rules and timing, until the new request's first token
(`marginal_ttft`: until every request there without a first token has one):
- the pass in progress ends when it was planned to (the new request is not in it);
- then each pass, as `Scheduler.schedule` plans it: running sequences first (a chunk of a prompt still
  being prefilled, one token for a decode) within the token budget, then waiting ones in arrival order
  while budget and ``max_num_seqs`` allow, each after its cached prefix;
- a pass costs ``timing.step_seconds`` of what it computes; a sequence that reaches its last prompt token
  samples its first token at the pass's end, and one with all its output tokens leaves (its blocks with it).

The KV blocks in use (Dynamo's timing slows each pass as they fill the cache) follow each sequence's
allocation, pass by pass, as the scheduler's. What it leaves out, so it is exact only without them: block
shortage (no admission waits for blocks, nothing is preempted); blocks a pass caches or evicts before a
waiting prompt is admitted (its cached prefix is what the cache holds now); blocks shared by sequences that
end before the new request's first token; remote KV transfers (it is for aggregated fleets). Requests that
arrive later are not known: this is the best greedy choice, not a bound.

Pure: reads the scheduler and the pass in progress, changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence as Seq
from dataclasses import dataclass

from dynamo_lite.engines.mock.scheduler import Scheduler, StepPlan, step_load
from dynamo_lite.engines.mock.timing import TimingModel


@dataclass(slots=True)
class _Lite:
    prompt: int  # prompt tokens
    computed: int  # tokens whose KV exists (prompt + output)
    outputs: int  # output tokens sampled
    max_tokens: int
    cached: int  # waiting: prompt tokens found cached at admission
    shared: int  # waiting: of those, blocks other sequences hold already (not newly in use when admitted)
    held: int = 0  # KV blocks held
    ours: bool = False

    @property
    def todo(self) -> int:
        """Tokens the next pass may compute: what is left of the prompt, or one (a decode)."""
        return self.prompt - self.computed if self.computed < self.prompt else 1


def predicted_ttft(sched: Scheduler, in_progress: StepPlan | None, ends_at: float, now: float, prompt_hashes: Seq[int],
                   prompt_tokens: int, cached_tokens: int | None, timing: TimingModel,
                   speedup: float = 1.0) -> float:  # fmt: skip
    """Seconds from ``now`` to the first token of a prompt of ``prompt_tokens`` (its full blocks' hashes
    ``prompt_hashes``) sent now to the worker of ``sched``, whose pass ``in_progress`` (None: idle) ends at
    ``ends_at``; the engine runs ``speedup`` times faster than the clock of ``now``. ``cached_tokens``: what
    if that many of its tokens were cached there (None: what the cache holds)."""
    ours = _ours(sched, prompt_hashes, prompt_tokens, cached_tokens)
    return _play(sched, in_progress, ends_at, now, ours, timing, speedup, until_all=False)[0] - now


def marginal_ttft(sched: Scheduler, in_progress: StepPlan | None, ends_at: float, now: float, prompt_hashes: Seq[int],
                  prompt_tokens: int, cached_tokens: int | None, timing: TimingModel,
                  speedup: float = 1.0) -> float:  # fmt: skip
    """`predicted_ttft`, plus the seconds by which sending it there delays the first tokens of the requests
    already there without one (their sum): what it costs all requests in the fleet so far."""
    ours = _ours(sched, prompt_hashes, prompt_tokens, cached_tokens)
    first, others = _play(sched, in_progress, ends_at, now, ours, timing, speedup, until_all=True)
    _, alone = _play(sched, in_progress, ends_at, now, None, timing, speedup, until_all=True)
    return first - now + others - alone


def _ours(sched: Scheduler, prompt_hashes: Seq[int], prompt_tokens: int, cached_tokens: int | None) -> _Lite:
    ours = _waiting(sched, prompt_hashes, prompt_tokens, 1)
    if cached_tokens is not None:
        ours.cached, ours.shared = min(cached_tokens, prompt_tokens - 1), 0
    ours.ours = True
    return ours


def _play(sched: Scheduler, in_progress: StepPlan | None, ends_at: float, now: float, ours: _Lite | None,
          timing: TimingModel, speedup: float, until_all: bool) -> tuple[float, float]:  # fmt: skip
    """Play the engine's passes forward: (the time of ``ours``'s first token, the sum of the times of the
    first tokens of the others that have none yet); ``until_all``: until every one has its first token, else
    until ``ours`` has (the sum is then partial)."""
    cfg, bs = sched.config, sched.config.block_size
    planned = {id(s): n for s, n in in_progress.scheduled} if in_progress is not None else {}
    used = sched.pool.num_used_blocks
    running: list[_Lite] = []
    for s in sched.running:
        computed = s.num_computed + planned.get(id(s), 0)
        outputs = len(s.output) + (1 if computed >= s.num_tokens else 0)
        if outputs < s.max_tokens:
            running.append(_Lite(len(s.prompt), computed, outputs, s.max_tokens, 0, 0, len(s.blocks)))
        else:
            used -= len(s.blocks)  # it ends with the pass in progress
    waiting = [_waiting(sched, s.prompt_hashes, len(s.prompt), s.max_tokens) for s in sched.waiting]
    if ours is not None:
        waiting.append(ours)
    awaiting = sum(1 for s in (*running, *waiting) if s.outputs == 0)
    first, others = float("nan"), 0.0
    t = ends_at if in_progress is not None else now
    while awaiting:
        budget = cfg.max_num_batched_tokens
        scheduled: list[tuple[_Lite, int]] = []
        for s in running:
            if budget <= 0:
                break
            n = min(s.todo, budget)
            need = -(-(s.computed + n) // bs)
            if need > s.held:
                used += need - s.held
                s.held = need
            scheduled.append((s, n))
            budget -= n
        while waiting and budget > 0 and len(running) < cfg.max_num_seqs:
            s = waiting.pop(0)
            s.computed = s.cached
            n = min(s.todo, budget)
            s.held = -(-(s.computed + n) // bs)
            used += s.held - s.shared
            running.append(s)
            scheduled.append((s, n))
            budget -= n
        if not scheduled:
            raise RuntimeError("nothing to schedule before the last first token")
        chunks = ((s.computed, n, s.computed >= s.prompt, s.computed + n >= s.prompt + s.outputs) for s, n in scheduled)
        t += timing.step_seconds(step_load(chunks, used, sched.pool.num_blocks)) / speedup
        for s, n in scheduled:
            s.computed += n
            if s.computed < s.prompt + s.outputs:
                continue  # a chunk of a longer prompt
            if s.outputs == 0:
                awaiting -= 1
                if s.ours:
                    first = t
                    if not until_all:
                        return first, others
                else:
                    others += t
            s.outputs += 1
            if s.outputs >= s.max_tokens:
                running.remove(s)
                used -= s.held - s.shared
    return first, others


def _waiting(sched: Scheduler, hashes: Seq[int], prompt_tokens: int, max_tokens: int) -> _Lite:
    """A waiting prompt, with the prefix the cache holds now (at most all but its last token, as the engine)."""
    bs = sched.config.block_size
    hits = sched.pool.lookup_prefix(hashes[: (prompt_tokens - 1) // bs])
    shared = sum(1 for b in hits if b.ref_count > 0)
    return _Lite(prompt_tokens, 0, 0, max_tokens, len(hits) * bs, shared)
