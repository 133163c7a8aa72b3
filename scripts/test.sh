#!/usr/bin/env bash
# The test command (README, .ci/run): set up .venv (every extra, the test tools and the browser the
# browser tests drive: scripts/setup.sh test), lint, check import layers, run the suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
echo "== ruff"
.venv/bin/ruff check .
echo "== import layers"
.venv/bin/lint-imports
echo "== tests"
.venv/bin/python -m pytest -q "$@"
