"""`python -m dynamo_lite.docs [--check]`: regenerate the reference docs and dashboards (see __init__)."""

from __future__ import annotations

import argparse
import sys

from dynamo_lite.docs import REPO, generated, stale
from dynamo_lite.docs import __doc__ as package_doc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dynamo_lite.docs", description=package_doc,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a generated file is stale")
    args = parser.parse_args(argv)
    if args.check:
        paths = stale()
        for path in paths:
            print(f"stale: {path.relative_to(REPO)} (run python -m dynamo_lite.docs)", file=sys.stderr)
        return 1 if paths else 0
    for path, text in generated().items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
            print(f"wrote {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
