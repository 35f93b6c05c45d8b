"""Produce an `EngineProfile` by sweeping an engine: `python -m planner.profiler --help`."""
