"""A simulated vLLM engine: vLLM's HTTP API, metrics and KV events, with a
timing model instead of a model. See `args.MockEngineArgs` and `engine_command`.
"""

from dynamo_lite.engines.mock.args import (
    KvEventsConfig,
    KvTransferConfig,
    MockEngineArgs,
    engine_command,
    parse_args,
    to_argv,
)

__all__ = ["KvEventsConfig", "KvTransferConfig", "MockEngineArgs", "engine_command", "parse_args", "to_argv"]
