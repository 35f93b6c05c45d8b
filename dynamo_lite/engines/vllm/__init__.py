"""Real vLLM engines: launched as `python -m vllm.entrypoints.openai.api_server` child processes."""

from dynamo_lite.engines.vllm.launcher import VllmEngine, VllmEngineConfig, vllm_device

__all__ = ["VllmEngine", "VllmEngineConfig", "vllm_device"]
