"""Where the benchmarks find their data and write their results: inside this repository, relative to this file.

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # the repository root
    from benchmarks.paths import MOONCAKE_TRACE, RESULTS, add_trace_option, recorded_args

Results record paths with `recorded` / `recorded_args`: relative to the repository when inside it, so
that a results file names no directory of the machine it ran on.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "benchmarks" / "data"
RESULTS = REPO / "benchmarks" / "results"
MOONCAKE_TRACE = DATA / "mooncake_synthetic_trace.jsonl"  # source, licence and format: benchmarks/data/README.md


def add_trace_option(parser: argparse.ArgumentParser) -> None:
    """``--trace PATH``: the trace to replay (any format of trace_formats.py, checked as the option is read), by
    default the Mooncake trace shipped in benchmarks/data."""
    from benchmarks.trace_formats import FORMATS, trace_path

    parser.add_argument("--trace", type=trace_path, default=MOONCAKE_TRACE,
                        help=f"the request trace: {FORMATS} (default: %(default)s)")


def comma_choices(parser: argparse.ArgumentParser, value: str, choices: Iterable[str], what: str,
                  also: Callable[[str], bool] = lambda _: False) -> list[str]:  # fmt: skip
    """The names of a comma-separated option, in order; the parser's error (exit 2) naming any not among
    ``choices`` (nor accepted by ``also``), or none given. ``what``: the name's kind, e.g. "router"."""
    names, known = [x.strip() for x in value.split(",") if x.strip()], list(choices)
    unknown = sorted(x for x in set(names) - set(known) if not also(x))
    if unknown or not names:
        parser.error(f"unknown {what}(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(known)}")
    return names


def recorded(value: Any) -> Any:
    """A path as a results file records it (relative to the repository if inside it, else as given); any
    other value unchanged."""
    if not isinstance(value, Path):
        return value
    try:
        return value.resolve().relative_to(REPO).as_posix()
    except ValueError:
        return str(value)


def recorded_args(args: argparse.Namespace) -> dict[str, Any]:
    """A benchmark's options for its results file, paths made `recorded`."""
    return {k: recorded(v) for k, v in vars(args).items()}


def run_header(argv: list[str] | None, args: argparse.Namespace) -> dict[str, Any]:
    """What every results file starts with: the command (``argv``, or the process's own when None), the
    machine, and the options as `recorded_args` gives them (as strings)."""
    return {"command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
            "args": {k: str(v) for k, v in recorded_args(args).items()}}  # fmt: skip


def write_results(path: Path, argv: list[str] | None, args: argparse.Namespace, **fields: Any) -> None:
    """A results file: `run_header`, then ``fields``, as indented JSON (its folder made if need be)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**run_header(argv, args), **fields}, indent=2) + "\n")
