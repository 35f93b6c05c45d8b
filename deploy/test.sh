#!/usr/bin/env bash
# Install what is needed, then run the whole test suite (extra arguments go to pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/setup.sh
step() { printf '\n==> %s\n' "$*"; }
# aiperf (a benchmark client the tests drive) pins huggingface-hub<2 and pyzmq 26, which vLLM's
# stack in .venv must not get: it lives in a venv of its own.
if [ ! -x .venv-aiperf/bin/aiperf ]; then
  step "installing aiperf into .venv-aiperf (a client the tests run; first time: about a minute)"
  "${PYTHON:-python3}" -m venv .venv-aiperf
  .venv-aiperf/bin/python -m pip install -q --upgrade pip
  .venv-aiperf/bin/python -m pip install -q aiperf==0.13.0
fi
printf '\n==> pytest\n'
exec .venv/bin/python -m pytest "$@"
