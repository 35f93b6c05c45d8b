#!/usr/bin/env bash
# Install what is needed, then bring up the default cluster in the foreground (Ctrl-C stops it).
#   bash deploy/quickstart.sh [cluster.yaml]
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/setup.sh
printf '\n==> orchestrator up -f %s\n' "${1:-deploy/examples/default.yaml}"
exec .venv/bin/orchestrator up -f "${1:-deploy/examples/default.yaml}"
