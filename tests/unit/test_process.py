"""ManagedProcess stops what its child started too: a vLLM API server killed after its grace period left its
engine core (a grandchild) running, orphaned, with its memory (seen in a test cluster whose engine start hung)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dynamo_lite.infra import ManagedProcess
from dynamo_lite.infra.process import ProcessFailed
from dynamo_lite.worker.__main__ import port_taken
from tests.waiting import eventually

# The child starts a grandchild that ignores SIGTERM, writes its pid, then (with "stubborn") ignores SIGTERM itself.
CHILD = """
import signal, subprocess, sys, time
grandchild = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"])
open(sys.argv[1], "w").write(str(grandchild.pid))
if sys.argv[2] == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
time.sleep(120)
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"  # a zombie is gone, waiting for its reaper


@pytest.mark.parametrize("child", ["stubborn", "obedient"])
async def test_stop_ends_the_child_and_what_it_left_behind(tmp_path: Path, child: str) -> None:
    pid_file = tmp_path / "grandchild.pid"
    process = ManagedProcess("child", [sys.executable, "-c", CHILD, str(pid_file), child], tmp_path / "child.log")
    process.start()
    eventually(lambda: pid_file.is_file() and pid_file.read_text() != "", timeout=30, what="the grandchild started")
    grandchild = int(pid_file.read_text())
    assert alive(grandchild)
    await process.stop(grace_s=0.5)
    assert not process.running()
    eventually(lambda: not alive(grandchild), timeout=5, what="the grandchild gone")


@pytest.mark.parametrize("line", ["zmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:38095')",
                                  "OSError: [Errno 98] error while attempting to bind: address already in use"])
async def test_a_fatal_line_in_the_log_fails_the_start_at_once(tmp_path: Path, line: str) -> None:
    """vLLM's NIXL listener thread dies on a taken port and the engine hangs, never healthy: the start fails
    when the line appears (in any case: asyncio lowercases it), not after the health timeout."""
    hang = f"import sys, time; print({line!r}, flush=True); time.sleep(120)"
    log_path = tmp_path / "engine.log"
    log_path.write_text("an earlier start: Address already in use\n")  # not this start's: ignored
    process = ManagedProcess("engine", [sys.executable, "-c", hang], log_path)
    process.start()

    async def never() -> bool:
        return False

    started = time.monotonic()
    with pytest.raises(ProcessFailed, match="logged 'Address already in use'"):
        await process.wait_healthy(never, timeout_s=60, fatal=b"Address already in use")
    assert time.monotonic() - started < 30
    await process.stop(grace_s=1)
    log_path.write_text("")
    quiet = ManagedProcess("quiet", [sys.executable, "-c", "import time; time.sleep(120)"], log_path)
    quiet.start()
    with pytest.raises(ProcessFailed, match="not healthy after 1 s"):
        await quiet.wait_healthy(never, timeout_s=1, fatal=b"Address already in use")
    await quiet.stop(grace_s=1)


def test_a_taken_port_is_recognised_however_it_is_written() -> None:
    """The agent starts again on new ports when a start failed on a taken port. A mock engine's (asyncio's)
    message is lowercase: a CI run failed because it was not recognised, and the worker was not retried."""
    assert port_taken("OSError: [Errno 98] error while attempting to bind on address ('127.0.0.1', 52675): "
                      "address already in use")
    assert port_taken("zmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:38095')")
    assert not port_taken("engine decode-0 exited with code 1 while starting: out of memory")


# A child that, on SIGTERM, ends its grandchild and exits (as vLLM's API server ends its engine core), and a
# grandchild that nothing but its parent ends (it ignores SIGHUP and SIGTERM).
GRACEFUL_CHILD = """
import signal, subprocess, sys, time
grandchild = subprocess.Popen([sys.executable, "-c", "import signal, time; "
    "signal.signal(signal.SIGHUP, signal.SIG_IGN); signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"])
def stop(*_):
    grandchild.kill()
    grandchild.wait()
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
open(sys.argv[1], "w").write(f"{grandchild.pid}")
time.sleep(120)
"""
# A supervisor (an agent) that starts the child with ManagedProcess and writes the child's pid.
SUPERVISOR = """
import sys, time
from dynamo_lite.infra import ManagedProcess
from pathlib import Path
child = ManagedProcess("child", [sys.executable, "-c", sys.argv[1], sys.argv[2]], Path(sys.argv[3]))
child.start()
open(sys.argv[4], "w").write(str(child.pid))
time.sleep(120)
"""


def test_a_child_stopped_when_its_supervisor_dies_still_ends_what_it_started(tmp_path: Path) -> None:
    """An agent killed while its engine is stopped (SIGSTOP, as the fault tests do; or a debugger): once the
    engine runs again it gets its parent-death SIGTERM and ends its engine core. The engine's process group
    became orphaned with a stopped member at the agent's death, and the kernel sends such a group SIGHUP: a
    child that did not ignore it died at once, by SIGHUP's default action, and its grandchild (vLLM's engine
    core) outlived both, holding its memory (a CI run left one, 2.7 GB, running after the suite)."""
    grand_file, child_file = tmp_path / "grandchild.pid", tmp_path / "child.pid"
    supervisor = subprocess.Popen([sys.executable, "-c", SUPERVISOR, GRACEFUL_CHILD, str(grand_file),
                                   str(tmp_path / "child.log"), str(child_file)])
    try:
        eventually(lambda: grand_file.is_file() and grand_file.read_text() != "" and child_file.is_file()
                   and child_file.read_text() != "", timeout=30, what="the child and grandchild started")
        child, grandchild = int(child_file.read_text()), int(grand_file.read_text())
        os.kill(child, signal.SIGSTOP)
        supervisor.kill()
        supervisor.wait()
        os.kill(child, signal.SIGCONT)
        eventually(lambda: not alive(child) and not alive(grandchild), timeout=10,
                   what="the child and, through its own shutdown, its grandchild gone")
    finally:
        supervisor.kill()
        for pid_file in (child_file, grand_file):
            if pid_file.is_file() and pid_file.read_text():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid_file.read_text()), signal.SIGKILL)
