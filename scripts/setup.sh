#!/usr/bin/env bash
# Create .venv (if missing) and install Fabric Twin with every extra and its test tools. Idempotent, and
# quick when nothing changed: the install runs again only when a file it depends on
# (pyproject.toml, setup.py, the .proto files, the example plugin) differs from the last
# install's (a stamp in .venv), so a second start needs no package registry.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
# The browser tests (tests/web) drive Debian's Chromium through Playwright (which downloads no browser
# here): install the package where it is missing and this user may (root, as CI runs).
if [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing Debian's chromium for the browser tests (tests/web)" >&2
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "setup: /usr/bin/chromium is missing; the browser tests need it: sudo apt-get install chromium" >&2
  fi
fi
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
STAMP=.venv/.fabric-twin-setup
inputs() {
  { ls pyproject.toml setup.py MANIFEST.in 2>/dev/null
    find proto tests/example_plugin -type f \( -name '*.proto' -o -name '*.py' -o -name '*.toml' \) \
      -not -path '*/build/*' -not -path '*.egg-info*' -not -path '*__pycache__*' 2>/dev/null
  } | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -d' ' -f1
}
want="$(inputs)"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && [ -x .venv/bin/twin ]; then
  exit 0  # the environment matches its inputs
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e '.[test,server,telemetry,ray,parquet,plot,web]'
# The example third-party plugin, installed the way a user installs any plugin package.
.venv/bin/python -m pip install -q --no-deps ./tests/example_plugin
echo "$want" > "$STAMP"
