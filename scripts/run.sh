#!/usr/bin/env bash
# The main job on an embedded default: set up, then run the twin's gRPC service on
# 127.0.0.1:50051 with local state in ./state (extra arguments go to `twin serve`).
# Stop it with Ctrl-C or SIGTERM (graceful). One-off prediction: .venv/bin/twin predict FILE.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/twin serve "$@"
