"""The log level: --log-level, else $DYNAMO_LITE_LOG, else info; exported to the processes started after."""

import os
import subprocess
import sys

import pytest

SHOW = """
import logging, os, subprocess, sys
from dynamo_lite.infra.entrypoint import configure_logging
configure_logging({level!r})
child = subprocess.run([sys.executable, "-c", "import os; print(os.environ['DYNAMO_LITE_LOG'])"],
                       capture_output=True, text=True, check=True).stdout.strip()
print(logging.getLevelName(logging.getLogger().level), child)
"""


def run(level: str | None, env_level: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "DYNAMO_LITE_LOG"}
    if env_level is not None:
        env["DYNAMO_LITE_LOG"] = env_level
    return subprocess.run([sys.executable, "-c", SHOW.format(level=level)], capture_output=True, text=True, env=env,
                          timeout=60)


@pytest.mark.parametrize("level, env_level, shown", [(None, None, "INFO info"), (None, "DEBUG", "DEBUG debug"),
                                                     ("warning", "debug", "WARNING warning")])
def test_the_level_comes_from_the_flag_then_the_environment_and_reaches_child_processes(level, env_level, shown):
    done = run(level, env_level)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == shown


def test_a_bad_level_in_the_environment_is_refused_by_name():
    done = run(None, "loud")
    assert done.returncode != 0
    assert "DYNAMO_LITE_LOG='loud': expected one of debug, info, warning, error" in done.stderr
