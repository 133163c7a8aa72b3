#!/usr/bin/env bash
# Create .venv (if missing) and install Fabric Twin with its test tools. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e '.[test]'
# Generated gRPC/protobuf modules (proto/ -> twin/rpc/), not kept in git.
.venv/bin/python scripts/gen_protos.py
# The example third-party plugin, installed the way a user installs any plugin package.
.venv/bin/python -m pip install -q --no-deps ./tests/example_plugin
