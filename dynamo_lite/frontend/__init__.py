"""The OpenAI-compatible frontend: validate, tokenize once, route by KV locality, disaggregate
prefill when it pays, stream from the decode worker, migrate on worker failure.

Start with `app.build_app`; `python -m dynamo_lite.frontend` is the entry point and
`component.FrontendProcess` runs it under `orchestrator up`.
"""
