"""Build a model directory atomically: into a temporary sibling, renamed when complete."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def building(target: Path) -> Iterator[Path]:
    """Yield a scratch directory; on success it becomes `target`, on failure it is removed."""
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = target.with_name(target.name + ".partial")
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir()
    try:
        yield scratch
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    shutil.rmtree(target, ignore_errors=True)
    scratch.rename(target)
