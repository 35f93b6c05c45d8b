"""Produce an `EngineProfile` by sweeping an engine: `python -m dynamo_lite.planning.profiler --help`."""
