"""Predicted time to first token: the `ttft` mode's cost, with rates learnt online.

Per candidate worker ``w`` for a prompt of ``P`` tokens, ``U`` of them not cached on ``w``:

    work(w)   = queued_prefill_tokens(w) + U          # prefill the engine runs before this one's first token
    kv(w)     = (decode_blocks(w) + ceil(P / B)) / capacity_blocks(w)      # KV held there once it joins
    attn      = U * (P - U / 2)                       # query x key pairs of this prompt's prefill
    ahead(w)  = requests still prefilling on w                  # each costs a step's fixed time
    ttft(w)   = r(w) * (t0 + t1 * work + t2 * work * kv + t3 * attn + t4 * max(0, kv - 1) + t5 * ahead)

- ``t0..t5`` are one fleet-wide linear model (a model's workers run the same engine), fitted by
  recursive least squares with forgetting (`Rls`) on every measured first token: the features at
  routing time against the seconds from sending to the first token. ``t2`` is the decode
  interference (each prefill step also runs the decodes of the batch, slower the more KV they read),
  ``t4`` the wait for KV space when the engine's cache cannot hold every running request, ``t5``
  the fixed cost of each engine step a request ahead takes.
- ``r(w)`` is the worker's own speed against the fleet's: an exponentially weighted mean of measured
  over fleet-predicted TTFT, clamped to [1/4, 4]; 1 until the worker has `RATIO_AFTER` measurements,
  and always 1 unless ``worker_speeds`` (for fleets of unlike workers).
- The seed: ``t0`` and ``t1`` from an engine profile (the planner's profiler: TTFT at each prompt
  length) or a generic default; the learnt model replaces it within a few dozen requests.

What a first token teaches is recorded at `Router.on_request_start` (the features of the chosen
worker, the send time) and learnt at `Router.on_prefill_done` when the caller says it measured a
real first token (not a whole answer arriving at once, not a prefill run elsewhere).

The decode guard: mean inter-token latency is fitted the same way, ``itl = d0 + d1 * kv``, from
finished streamed requests, with a prior that keeps the slope near flat until data says otherwise,
and predicted only within the KV fills seen (no extrapolation). After `ITL_MIN_SAMPLES` streams, a
candidate whose predicted ITL exceeds the target is passed over while any candidate keeps it
(`ITL_PENALTY_S` is added to its cost).

Pure: the caller passes the clock's readings; no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

Features = tuple[float, float, float, float, float, float]

TOKENS = 1000.0  # work in thousands of tokens, attention pairs in millions: features near 1
PAIRS = 1e6
RATIO_MIN, RATIO_MAX = 0.25, 4.0
RATIO_ALPHA = 0.05  # weight of a new measurement in a worker's speed ratio
RATIO_AFTER = 30  # measurements of a worker before its ratio counts
ITL_PENALTY_S = 1000.0  # added to the cost of a candidate that would break the ITL target
ITL_MIN_SAMPLES = 50  # finished streams before the ITL guard acts
VAR_CAP = 100.0  # a coefficient's variance never exceeds this many times the largest prior variance


def features(queued_tokens: float, uncached: int, prompt_tokens: int, kv_fill: float, ahead: float = 0.0) -> Features:
    """The TTFT model's inputs for one candidate (see the module docstring)."""
    work = (queued_tokens + uncached) / TOKENS
    cached = prompt_tokens - uncached
    return (1.0, work, work * kv_fill, uncached * (cached + uncached / 2) / PAIRS, max(0.0, kv_fill - 1.0), ahead)


class Rls:
    """Recursive least squares with exponential forgetting: ``y ~ theta . x``.

    ``prior_var`` is the variance of the seed's coefficients: small keeps the seed until data
    disagrees with it, large lets the first measurements decide. ``forget`` (0 < f <= 1) weights
    a measurement ``n`` updates old by ``forget ** n``, so the model follows an engine that changes.
    """

    def __init__(self, seed: Sequence[float], prior_var: float | Sequence[float] = 1.0, forget: float = 0.995) -> None:
        n = len(seed)
        var = [prior_var] * n if isinstance(prior_var, (int, float)) else list(prior_var)
        self.theta = list(seed)
        self._p = [[var[i] if i == j else 0.0 for j in range(n)] for i in range(n)]
        self._forget = forget
        self._var_cap = VAR_CAP * max(var)
        self.updates = 0

    def predict(self, x: Sequence[float]) -> float:
        return sum(t * v for t, v in zip(self.theta, x))

    def update(self, x: Sequence[float], y: float) -> None:
        p, n, lam = self._p, len(self.theta), self._forget
        px = [sum(p[i][j] * x[j] for j in range(n)) for i in range(n)]
        denom = lam + sum(x[i] * px[i] for i in range(n))
        if denom <= 1e-12:
            return
        gain = [v / denom for v in px]
        err = y - self.predict(x)
        self.theta = [t + g * err for t, g in zip(self.theta, gain)]
        # P = (I - gain x^T) P (I - gain x^T)^T + lam gain gain^T, over lam: Joseph's form of the update
        # P - gain px^T. Equal in exact arithmetic, but a sum of positive semi-definite terms, and kept
        # symmetric, so rounding does not drive P indefinite. The textbook form did, on features of
        # scales 1e-3 to 1e3 (a short prompt's attention term beside a long one's): after ~5,000 first
        # tokens P had negative variances and the coefficients ran to -1e4, every prediction clamped to 0.
        a = [[p[i][j] - gain[i] * px[j] for j in range(n)] for i in range(n)]  # (I - gain x^T) P
        ax = [sum(a[i][j] * x[j] for j in range(n)) for i in range(n)]
        new = [[(a[i][j] - ax[i] * gain[j] + lam * gain[i] * gain[j]) / lam for j in range(n)] for i in range(n)]
        for i in range(n):
            for j in range(i):
                new[i][j] = new[j][i] = (new[i][j] + new[j][i]) / 2
        # Forgetting inflates the variance of a feature that stays 0 (no KV overflow yet) by 1/lam per
        # update; capped, so its first non-zero sample cannot swing the fit.
        for i in range(n):
            if new[i][i] > self._var_cap:
                scale = (self._var_cap / new[i][i]) ** 0.5  # scale row and column i: stays positive definite
                for j in range(n):
                    new[i][j] *= scale
                    new[j][i] *= scale
        self._p = new
        self.updates += 1


@dataclass(frozen=True, slots=True)
class Seed:
    """Where the TTFT model starts: fixed seconds per prefill, and seconds per 1,000 prefill tokens."""

    base_s: float = 0.02
    per_1k_tokens_s: float = 0.03

    @classmethod
    def from_profile(cls, points: Sequence[tuple[int, float]]) -> Seed:
        """A line through an engine profile's (prompt tokens, TTFT seconds) points, by least squares."""
        if len(points) < 2:
            raise ValueError("a profile needs at least two (tokens, seconds) points")
        xs = [t / TOKENS for t, _ in points]
        ys = [s for _, s in points]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        var = sum((x - mx) ** 2 for x in xs)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var if var else 0.0
        return cls(max(0.0, my - slope * mx), max(1e-6, slope))


@dataclass(slots=True)
class _Pending:
    worker_id: str
    x: Features
    kv_fill: float
    sent_at: float
    first_at: float | None = None


@dataclass
class TtftModel:
    """The fleet's TTFT and ITL models, each worker's speed ratio, and requests awaiting a measurement."""

    seed: Seed = field(default_factory=Seed)
    worker_speeds: bool = False  # True: each worker's ratio counts; False: every worker runs at the fleet's speed

    def __post_init__(self) -> None:
        s = self.seed
        # Prior variance per coefficient scale: the seed's two terms are trusted loosely, the rest start at 0.
        self.ttft = Rls((s.base_s, s.per_1k_tokens_s, 0.0, 0.0, 0.0, 0.0), prior_var=1.0)
        # The ITL slope starts near flat (sd 0.1 s per unit of KV fill): KV fill moves in a narrow band
        # under steady load, and a slope fitted on it alone extrapolates wildly.
        self.itl = Rls((0.01, 0.0), prior_var=(1.0, 0.01))
        self.itl_fill_seen = (float("inf"), float("-inf"))  # KV fills the ITL model was fitted on
        self.ratio: dict[str, float] = {}  # workers with RATIO_AFTER measurements or more
        self._seen: dict[str, tuple[int, float]] = {}  # per worker: measurements, mean measured / fleet-predicted
        self._pending: dict[str, _Pending] = {}

    def predict_itl(self, kv_fill: float) -> float:
        """Predicted mean ITL at ``kv_fill``, held within the fills it was fitted on (no extrapolation).

        A fitted slope below 0 counts as flat, at the fit's value at the least fill seen (its highest):
        more KV in use never makes decoding faster. Under overload the fit can find otherwise (a request
        sent to a long queue decodes after the crush has passed), and the guard then passed over every
        idle worker for the busiest one."""
        lo, hi = self.itl_fill_seen
        d0, d1 = self.itl.theta
        fill = min(hi, max(lo, kv_fill)) if d1 >= 0.0 else lo  # a falling fit: its highest value, held flat
        return max(0.0, d0 + d1 * fill)

    @property
    def itl_ready(self) -> bool:
        """Enough finished streams for the ITL guard to act on (`ITL_MIN_SAMPLES`)."""
        return self.itl.updates >= ITL_MIN_SAMPLES

    def prefill_seconds(self, uncached_tokens: int, context_tokens: int = 0, fixed: bool = True) -> float:
        """The learnt prefill time of ``uncached_tokens`` after ``context_tokens`` cached ones on an idle worker
        of average speed: the fixed, per-token and attention terms, as `score_ttft` counts them. Without
        ``fixed``, only the last two: what the prompt's compute adds to the engine steps that carry it (the
        fixed term is a first token's cost whatever its prompt: the step in progress, the request's way in
        and out)."""
        _, work, _, attn, _, _ = features(0, uncached_tokens, uncached_tokens + context_tokens, 0.0)
        t0, t1, _, t3, _, _ = self.ttft.theta
        return max(0.0, (t0 if fixed else 0.0) + max(0.0, t1) * work + max(0.0, t3) * attn)

    def forget_worker(self, worker_id: str) -> None:
        self.ratio.pop(worker_id, None)
        self._seen.pop(worker_id, None)

    # --- learning, once per request -------------------------------------------------------------
    def sent(self, request_id: str, worker_id: str, x: Features, kv_fill: float, now: float) -> None:
        self._pending[request_id] = _Pending(worker_id, x, kv_fill, now)

    def first_token(self, request_id: str, now: float, measured: bool) -> None:
        """The request's first token (or its whole answer) came at ``now``; learn from it if ``measured``."""
        pending = self._pending.get(request_id)
        if pending is None or pending.first_at is not None:
            return
        if not measured:
            del self._pending[request_id]
            return
        pending.first_at = now
        seen = now - pending.sent_at
        fleet = self.ttft.predict(pending.x)
        # The fleet model learns every worker's times as they are (so it predicts the fleet's mean); a
        # worker's ratio says how it differs, and counts only once it has RATIO_AFTER measurements: a
        # worker measured early, against a seed still far off, must not look faster than those not yet.
        self.ttft.update(pending.x, seen)
        if fleet > 1e-6:
            n, mean = self._seen.get(pending.worker_id, (0, 1.0))
            mean = (1 - RATIO_ALPHA) * mean + RATIO_ALPHA * (seen / fleet) if n else seen / fleet
            self._seen[pending.worker_id] = (n + 1, mean)
            if n + 1 >= RATIO_AFTER and self.worker_speeds:
                self.ratio[pending.worker_id] = min(RATIO_MAX, max(RATIO_MIN, mean))

    def finished(self, request_id: str, now: float, output_tokens: int) -> None:
        """The request ended; a streamed one with two or more tokens teaches the ITL model."""
        pending = self._pending.pop(request_id, None)
        if pending is None or pending.first_at is None or output_tokens < 2:
            return
        self.learn_itl(pending.kv_fill, (now - pending.first_at) / (output_tokens - 1))

    def learn_itl(self, kv_fill: float, itl_s: float) -> None:
        """One stream's mean inter-token latency, at the KV fill it was routed at."""
        self.itl.update((1.0, kv_fill), itl_s)
        lo, hi = self.itl_fill_seen
        self.itl_fill_seen = (min(lo, kv_fill), max(hi, kv_fill))

    def in_flight(self) -> int:
        return len(self._pending)
