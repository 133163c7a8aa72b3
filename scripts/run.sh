#!/usr/bin/env bash
# The main job on an embedded default: set up, then predict the example scenarios.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/twin predict "${1:-examples/llama3-405b-16k-roce.yaml}"
