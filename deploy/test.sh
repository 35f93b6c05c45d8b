#!/usr/bin/env bash
# Install what is needed, then run the whole test suite (extra arguments go to pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/setup.sh
printf '\n==> pytest\n'
exec .venv/bin/python -m pytest "$@"
