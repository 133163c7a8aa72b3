#!/usr/bin/env bash
# The main job on an embedded default: set up the serving environment (.venv-serve: the server,
# telemetry and web extras only; no root, no apt, no test tools), then run the twin's gRPC service on
# 127.0.0.1:50051 with its web view and local state in ./state (extra arguments go to `twin serve`).
# Stop it with Ctrl-C or SIGTERM (graceful). One-off prediction: .venv-serve/bin/twin predict FILE.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh serve
exec .venv-serve/bin/twin serve "$@"
