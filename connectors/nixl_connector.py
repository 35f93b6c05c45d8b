"""vLLM's NixlConnector, made to share a small CPU machine: NIXL's progress thread, the engine's cores, vLLM's spin.

NIXL's Python agent hard-codes `pthrDelay = 0` for its progress thread, which then
polls without pause: every idle vLLM instance with NixlConnector burns a whole
core. On CPU buffers there is nothing to gain from that. This subclass keeps
vLLM's connector unchanged and, before the first NIXL agent of the process is
created, swaps the binding's config class seen by `nixl._api` for one whose
progress delay never goes below `kv_connector_extra_config.progress_delay_us`.
Installed packages are not edited; the change lives in this process only.

On a CPU, vLLM's NIXL worker also moves the thread that creates it, the model runner's own thread
(OpenMP's first thread, which computes), to the last core of each NUMA node: "reserved" for loading
KV. On a machine whose engines are each bound to cores of their own (VLLM_CPU_OMP_THREADS_BIND), that
put every engine's compute on the same last core. The subclass puts that thread, and the threads
NIXL started meanwhile, back on the cores they were given (`kv_connector_extra_config.keep_cpu_affinity`,
true by default; false leaves vLLM's move, as benchmarks/pd_cpu.py compares).

vLLM's engine core and its model worker wait for each other's next message in shared memory by
spinning on sched_yield, for a second after each message: while a request runs, the engine core's
thread takes most of a core, only to wait for the worker computing on another. With
`kv_connector_extra_config.spin_sleep_us` the subclass makes each turn of that wait sleep that long
instead (vLLM's own spin when 0, the default: on this 2-core machine the sleep did not pay for itself;
docs/design/nixl.md has the measurements).

vLLM loads it with `"kv_connector": "NixlConnector", "kv_connector_module_path":
"connectors.nixl_connector"`: the same class name, so vLLM's checks for
NixlConnector keep applying.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
import types
from collections.abc import Iterator
from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.nixl.connector import (
    NixlConnector as _VllmNixlConnector,
)

log = logging.getLogger(f"vllm.{__name__}")  # vLLM prints its own logger tree in the engine's log; no other


class NixlConnector(_VllmNixlConnector):
    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any = None) -> None:
        delay_us = int(vllm_config.kv_transfer_config.get_from_extra_config("progress_delay_us", 0))
        if delay_us > 0:
            install_progress_delay(delay_us)
        spin_sleep_us = int(vllm_config.kv_transfer_config.get_from_extra_config("spin_sleep_us", 0))
        if spin_sleep_us > 0:
            install_spin_sleep(spin_sleep_us)
        keep = bool(vllm_config.kv_transfer_config.get_from_extra_config("keep_cpu_affinity", True))
        with kept_cpu_affinity() if keep else contextlib.nullcontext():
            super().__init__(vllm_config, role, kv_cache_config)


@contextlib.contextmanager
def kept_cpu_affinity() -> Iterator[None]:
    """This thread, and the threads started meanwhile, on this thread's CPUs when the block ends."""
    if not hasattr(os, "sched_getaffinity"):
        yield
        return
    cpus, before = os.sched_getaffinity(0), _threads()
    try:
        yield
    finally:
        moved = [tid for tid in [0, *(_threads() - before)] if _affinity(tid) not in (None, cpus)]
        for tid in moved:
            with contextlib.suppress(OSError):  # a thread may have ended meanwhile
                os.sched_setaffinity(tid, cpus)
        if moved:
            log.info("kept %d thread(s) on CPUs %s (vLLM's NIXL worker had moved them)", len(moved), sorted(cpus))


def _threads() -> set[int]:
    return {int(t) for t in os.listdir("/proc/self/task")}


def _affinity(tid: int) -> set[int] | None:
    try:
        return os.sched_getaffinity(tid)
    except OSError:
        return None


_spin_sleep_s = 0.0


def install_spin_sleep(sleep_us: int) -> None:
    """Make each turn of vLLM's shared-memory wait in this process sleep `sleep_us` instead of only
    yielding the CPU. The engine core and its model worker wait for each other's next message by
    spinning on sched_yield (for 1 s after the last message), which holds a core meanwhile."""
    global _spin_sleep_s
    from vllm.distributed.device_communicators import shm_broadcast

    _spin_sleep_s = sleep_us / 1e6
    if shm_broadcast.sched_yield is not _sleep_a_little:
        shm_broadcast.sched_yield = _sleep_a_little
        log.info("shared-memory waits sleep %d us a turn", sleep_us)


def _sleep_a_little() -> None:
    time.sleep(_spin_sleep_s)


def install_progress_delay(delay_us: int) -> None:
    """Make every NIXL agent created from now on in this process sleep `delay_us` between polls."""
    from vllm.distributed.nixl_utils import NixlWrapper

    if NixlWrapper is None:
        return  # NIXL not installed: vLLM reports that itself
    api = sys.modules[NixlWrapper.__module__]
    bindings = api.nixlBind
    if isinstance(bindings, _DelayedBindings):
        bindings.delay_us = delay_us
        return
    api.nixlBind = _DelayedBindings(bindings, delay_us)
    log.info("NIXL progress thread delay set to %d us", delay_us)


class _DelayedBindings(types.ModuleType):
    """The NIXL binding module, except that `nixlAgentConfig` clamps `pthrDelay`."""

    def __init__(self, bindings: types.ModuleType, delay_us: int) -> None:
        super().__init__(bindings.__name__)
        self._bindings = bindings
        self.delay_us = delay_us
        base = bindings.nixlAgentConfig
        outer = self

        class DelayedAgentConfig(base):  # type: ignore[misc, valid-type]
            @property
            def pthrDelay(self) -> int:  # noqa: N802 - NIXL's name
                return base.pthrDelay.__get__(self)

            @pthrDelay.setter
            def pthrDelay(self, value: int) -> None:  # noqa: N802
                base.pthrDelay.__set__(self, max(int(value), outer.delay_us))

        self.nixlAgentConfig = DelayedAgentConfig

    def __getattr__(self, name: str) -> Any:
        return getattr(self._bindings, name)
