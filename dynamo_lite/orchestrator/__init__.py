"""The cluster's lifecycle: `orchestrator up/down/status/scale`, the supervisor and its state.

- `cli`: the command line and the composition root of `up` (what it starts, in order);
- `supervisor`: starts and stops the embedded servers, the frontend and the pools;
- `state`: the state file that `status` and `down` read;
- `status`: the health report of a running cluster;
- `admin`: `up`'s admin API (status, pools, scaling), apart from the public API.
"""
