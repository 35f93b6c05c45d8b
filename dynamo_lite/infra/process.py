"""A child process that dies with its parent, is health-checked, and stops in bounded time."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import msgspec

log = logging.getLogger(__name__)


class ProcessInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A process a component started, as the state file and `status` list it."""

    name: str  # "nats-server", "etcd", "frontend", "worker decode-0" ...
    pid: int
    url: str | None = None  # where it serves, if it does
    log: str | None = None  # its log file
    index: int | None = None  # which of a component's several processes on one port (the frontend's)
    metrics_url: str | None = None  # where its own /metrics is, when not at `url` (a port shared by several)


def _die_with_parent(argv: list[str]) -> list[str]:
    """Wrap `argv` so the kernel sends the child SIGTERM when its parent dies (no orphans).

    util-linux's `setpriv --pdeathsig` sets it just before exec. (Setting it from a
    Python preexec_fn would force a plain fork() of this process, which aborts in the
    child when gRPC's threads are running, as they are next to an etcd client.)

    coreutils' `nohup` makes the child ignore SIGHUP. The child leads a process group in its
    parent's session; if the parent dies while the child is stopped (SIGSTOP, a debugger), the
    group is orphaned with a stopped member and the kernel sends it SIGHUP. By SIGHUP's default
    action the child would die at once, before its SIGTERM handler runs, and leave what it
    started (vLLM's engine core) running. Ignoring it, the child shuts down on the SIGTERM.
    """
    nohup = shutil.which("nohup")
    if nohup is None:
        log.warning("nohup (coreutils) not found: a child stopped when its supervisor dies may leave orphans")
    else:
        argv = [nohup, *argv]
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        log.warning("setpriv (util-linux) not found: children will outlive a killed supervisor")
        return argv
    return [setpriv, "--pdeathsig", "TERM", "--", *argv]


class ProcessFailed(RuntimeError):
    """The child exited or never became healthy; the message carries its log's tail."""


class RestartableChild:
    """Mixin for a supervised part that is one child process (`self.process`) and whose `start()`
    brings it back as it was (same ports, same data): see dynamo_lite.orchestrator.reconciler."""

    part: str
    process: ManagedProcess
    start: Callable[[], Awaitable[None]]  # the part's own start (health-checked)

    def failure(self) -> str | None:
        return self.process.exit_reason()

    async def recover(self) -> None:
        await self.start()


class ManagedProcess:
    """One child process with its output in a log file.

    `start()` launches it; `wait_healthy(check)` polls `check` until it returns True,
    failing at once if the child exits; `stop()` sends SIGTERM, then SIGKILL after
    `grace_s`. Both `start` and `stop` are idempotent.
    """

    def __init__(self, name: str, argv: list[str], log_path: Path, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.env = env
        self.popen: subprocess.Popen[bytes] | None = None
        self._log_start = 0

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def start(self) -> None:
        if self.running():
            return
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as out:
            self._log_start = out.tell()  # where this start's output begins
            self.popen = subprocess.Popen(
                _die_with_parent(self.argv),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **self.env} if self.env else None,
                # Its own process group, so `stop` ends what it leaves behind too; not its own session
                # (start_new_session), which on a kernel with sched_autogroup gives it a scheduling group of
                # its own: vLLM engines started so stalled 0.3-1.1 s at a time under load on 2 shared cores
                # (docs/benchmarks.md, "On real vLLM engines").
                process_group=0,
            )
        log.info("started %s (pid %d), log %s", self.name, self.popen.pid, self.log_path)

    async def wait_healthy(self, check: Callable[[], Awaitable[bool]], timeout_s: float,
                           fatal: bytes | None = None) -> None:  # fmt: skip
        """Poll `check` until it holds. Fails at once if the child exits, or if `fatal` appears in what it logs,
        in any case (an error that leaves it running but never healthy: vLLM's NIXL listener thread failing to
        bind)."""
        deadline = time.monotonic() + timeout_s
        offset, carry = self._log_start, b""
        while True:
            if not self.running():
                raise ProcessFailed(f"{self.name} exited with code {self._code()} while starting\n{self.log_tail()}")
            if fatal is not None:
                with open(self.log_path, "rb") as f:
                    f.seek(offset)
                    new = f.read().lower()
                offset += len(new)
                if fatal.lower() in carry + new:
                    raise ProcessFailed(f"{self.name} logged {fatal.decode()!r} while starting\n{self.log_tail()}")
                carry = (carry + new)[-len(fatal):]
            if await check():
                return
            if time.monotonic() > deadline:
                raise ProcessFailed(f"{self.name} not healthy after {timeout_s:.0f} s\n{self.log_tail()}")
            await asyncio.sleep(0.1)

    async def stop(self, grace_s: float = 10.0) -> int | None:
        """Stop the child, then whatever it started and left behind; returns its exit code (None if it was
        never started)."""
        if self.popen is None:
            return None
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            if not await self._wait(grace_s):
                log.warning("%s did not stop within %.0f s of SIGTERM; killing it", self.name, grace_s)
                self.popen.kill()
                await self._wait(5.0)
        self._kill_group()
        return self.popen.returncode

    def exit_reason(self) -> str | None:
        """Why the child is not running although it was started (exit code and last log lines); None
        while it runs, or before its first start."""
        if self.popen is None or self.popen.poll() is None:
            return None
        return f"{self.name} exited with code {self.popen.returncode}\n{self.log_tail(10)}"

    def kill(self) -> None:
        """SIGKILL, for tests that simulate a crash."""
        if self.running():
            assert self.popen is not None
            self.popen.kill()
            self.popen.wait()
            self._kill_group()

    def _kill_group(self) -> None:
        """SIGKILL to what is left of the child's process group (its own: process_group=0). A vLLM API server
        killed after its grace period leaves its engine core running otherwise, holding its memory, orphaned."""
        assert self.popen is not None
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass  # nothing left

    async def _wait(self, timeout_s: float) -> bool:
        assert self.popen is not None
        deadline = time.monotonic() + timeout_s
        while self.popen.poll() is None:
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    def _code(self) -> int | None:
        return self.popen.returncode if self.popen else None

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join("  | " + line for line in text.splitlines()[-lines:])
