"""`python -m dynamo_lite.k8s.prepare_model PATH --cache-dir DIR`: a worker pod's init step.

Builds a builtin model (`builtin:smollm2`, `builtin:tiny`) under DIR, or checks that
a local model directory (e.g. on the models volume) is there, with the same
`resolve_model` that `orchestrator up` uses; prints the directory to serve.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dynamo_lite.engines.models import ModelNotFound, resolve_model


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dynamo_lite.k8s.prepare_model", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("path", help="models[].path of the spec")
    p.add_argument("--cache-dir", type=Path, required=True, help="where builtin models are built")
    args = p.parse_args(argv)
    try:
        print(resolve_model(args.path, args.cache_dir))
    except ModelNotFound as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
