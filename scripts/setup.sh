#!/usr/bin/env bash
# Create .venv (if missing) and install Fabric Twin with every extra and its test tools. Idempotent, and
# quick when nothing changed: the install runs again only when a file it depends on
# (pyproject.toml, setup.py, the .proto files) differs from the last install's (a stamp in .venv),
# so a second start needs no package registry. .venv is also the serving environment (scripts/run.sh),
# so the example third-party plugin (tests/example_plugin) is not installed here: the tests that need
# it install it into a temporary directory (tests/conftest.py); one an older setup left is removed.
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
# The example plugin, where an older setup installed it: not in the serving environment (no registry needed).
if compgen -G '.venv/lib/python*/site-packages/twin_example_dragonfly-*.dist-info' >/dev/null; then
  echo "setup: removing the example plugin (twin-example-dragonfly) from .venv; the tests install it themselves" >&2
  .venv/bin/python -m pip uninstall -q -y twin-example-dragonfly
fi
STAMP=.venv/.fabric-twin-setup
inputs() {
  { ls pyproject.toml setup.py MANIFEST.in 2>/dev/null
    find proto -type f -name '*.proto' 2>/dev/null
  } | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -d' ' -f1
}
want="$(inputs)"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && [ -x .venv/bin/twin ]; then
  exit 0  # the environment matches its inputs
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e '.[test,server,telemetry,ray,parquet,plot,web,traces]'
echo "$want" > "$STAMP"
