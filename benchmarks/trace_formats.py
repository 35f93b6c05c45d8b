"""The request traces the benchmarks replay, whatever their format, as Mooncake's rows.

- **Mooncake** (`.jsonl`, kvcache-ai/Mooncake's traces): `timestamp` (ms), `input_length`, `output_length`,
  `hash_ids` (one id per 512-token block; equal ids are an equal prefix).
- **Azure LLM inference** (CSV, Azure/AzurePublicDataset 2023 and 2024): `TIMESTAMP` (a date and time),
  `ContextTokens`, `GeneratedTokens`.
- **BurstGPT** (CSV, lzzmm/BurstGPT): `Timestamp` (seconds), `Request tokens`, `Response tokens`; other
  columns (`Model`, `Total tokens`, `Log Type`) are not read.

The CSV traces say nothing of shared prefixes: each of their requests gets hash ids of its own, so no two share a
block (a replay of them measures load, never prefix reuse). Times are in ms since the trace's first request
(Azure's are dates, BurstGPT's may start later than 0). A file that is none of these, or a row that cannot be read, is a
`TraceError` naming the file, the line and the problem.

    for row in read_trace(path):
        row.timestamp_ms, row.input_length, row.output_length, row.hash_ids
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

BLOCK = 512  # tokens per Mooncake hash id
FORMATS = "Mooncake jsonl, Azure LLM inference CSV or BurstGPT CSV"
_AZURE = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_BURST = ("Timestamp", "Request tokens", "Response tokens")
_WHEN = re.compile(r"(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d)(?:\.(\d+))?(.*)")


class TraceError(ValueError):
    """A trace file that cannot be read: the file, the line and the problem."""


@dataclass(frozen=True, slots=True)
class TraceRow:
    """One request of a trace, in Mooncake's terms."""

    timestamp_ms: float  # arrival, since the trace's first
    input_length: int  # prompt tokens
    output_length: int  # tokens generated
    hash_ids: tuple[int, ...]  # one id per 512-token block of the prompt


def read_trace(path: Path) -> Iterator[TraceRow]:
    """The rows of the trace at `path`, in file order, their times in ms since its first row's; its format told
    by its first line."""
    first_ms: float | None = None
    for row in _rows(path):
        first_ms = row.timestamp_ms if first_ms is None else first_ms
        yield TraceRow(row.timestamp_ms - first_ms, row.input_length, row.output_length, row.hash_ids)


def _rows(path: Path) -> Iterator[TraceRow]:
    with path.open(newline="") as f:
        first = f.readline()
        f.seek(0)
        if first.lstrip().startswith("{"):
            yield from _mooncake(path, f)
            return
        header = next(csv.reader([first]), [])
        if all(c in header for c in _AZURE):
            yield from _csv(path, f, _AZURE, _azure_ms)
        elif all(c in header for c in _BURST):
            yield from _csv(path, f, _BURST, _burst_ms)
        else:
            raise TraceError(f"{path}: line 1: not a trace this reads ({FORMATS}): {first.strip()[:80]!r}")


def trace_path(value: str) -> Path:
    """An argparse `type` for --trace: an existing file whose first line is one of the formats read here."""
    path = Path(value)
    try:
        next(read_trace(path), None)
    except (OSError, TraceError) as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return path


def _mooncake(path: Path, f: Iterator[str]) -> Iterator[TraceRow]:
    for i, line in enumerate(f, start=1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
            yield TraceRow(float(r["timestamp"]), int(r["input_length"]), int(r["output_length"]),
                           tuple(int(h) for h in r["hash_ids"]))  # fmt: skip
        except (ValueError, KeyError, TypeError) as e:
            raise TraceError(f"{path}: line {i}: not a Mooncake row ({type(e).__name__}: {e})") from None


def _csv(path: Path, f: Iterator[str], columns: tuple[str, str, str],
         ms: Callable[[str], float]) -> Iterator[TraceRow]:  # fmt: skip
    next_id = 1 << 40  # (above any Mooncake trace's ids)
    for i, row in enumerate(csv.DictReader(f), start=2):
        try:
            at = ms(row[columns[0]] or "")
            isl, osl = (_count(c, row[c]) for c in columns[1:])
        except ValueError as e:
            raise TraceError(f"{path}: line {i}: {e}") from None
        blocks = max(1, math.ceil(isl / BLOCK))
        yield TraceRow(at, isl, osl, tuple(range(next_id, next_id + blocks)))
        next_id += blocks


def _count(column: str, value: str | None) -> int:
    """A token count (written `12` or `12.0`)."""
    try:
        count = float(value or "")
    except ValueError:
        raise ValueError(f"{column} {value!r} is not a number") from None
    if count < 0 or not count.is_integer():
        raise ValueError(f"{column} {value!r} is not a count of tokens")
    return int(count)


def _burst_ms(value: str) -> float:
    """BurstGPT's Timestamp (seconds since the trace's start) in ms."""
    try:
        return float(value) * 1000
    except ValueError:
        raise ValueError(f"Timestamp {value!r} is not a number of seconds") from None


def _azure_ms(value: str) -> float:
    """Azure's TIMESTAMP (`2023-11-16 18:15:46.6805900`, `2024-05-10 00:00:00.009930+00:00`: up to 7 digits of a
    second, a zone or none, which is UTC) in ms since the epoch."""
    m = _WHEN.fullmatch(value.strip())
    if m is None:
        raise ValueError(f"TIMESTAMP {value!r} is no date and time")
    when = datetime.fromisoformat(m[1] + m[3])
    when = when if when.tzinfo is not None else when.replace(tzinfo=UTC)
    return when.timestamp() * 1000 + float(f"0.{m[2] or 0}") * 1000
