"""vLLM's NixlConnector with a non-zero delay in NIXL's progress thread.

NIXL's Python agent hard-codes `pthrDelay = 0` for its progress thread, which then
polls without pause: every idle vLLM instance with NixlConnector burns a whole
core. On CPU buffers there is nothing to gain from that. This subclass keeps
vLLM's connector unchanged and, before the first NIXL agent of the process is
created, swaps the binding's config class seen by `nixl._api` for one whose
progress delay never goes below `kv_connector_extra_config.progress_delay_us`.
Installed packages are not edited; the change lives in this process only.

vLLM loads it with `"kv_connector": "NixlConnector", "kv_connector_module_path":
"connectors.nixl_connector"`: the same class name, so vLLM's checks for
NixlConnector keep applying.
"""

from __future__ import annotations

import logging
import sys
import types
from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.nixl.connector import (
    NixlConnector as _VllmNixlConnector,
)

log = logging.getLogger(__name__)


class NixlConnector(_VllmNixlConnector):
    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any = None) -> None:
        delay_us = int(vllm_config.kv_transfer_config.get_from_extra_config("progress_delay_us", 0))
        if delay_us > 0:
            install_progress_delay(delay_us)
        super().__init__(vllm_config, role, kv_cache_config)


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
