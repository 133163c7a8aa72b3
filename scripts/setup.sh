#!/usr/bin/env bash
# Set up a virtual environment for one job (idempotent):
#   bash scripts/setup.sh serve   .venv-serve: what `twin serve` needs and nothing more (the server,
#                                 telemetry and web extras); never root, never apt. scripts/run.sh.
#   bash scripts/setup.sh [test]  .venv: every extra and the test tools (pytest, ruff, Playwright, Node.js),
#                                 and Debian's Chromium for the browser tests where it is missing and
#                                 this user may install it (root, as CI runs). scripts/test.sh.
# Quick when nothing changed: the install runs again only when a file it depends on (pyproject.toml,
# setup.py, the .proto files) differs from the last install's (a stamp in the environment), so a
# second start needs no package registry. The example third-party plugin (tests/example_plugin) is
# installed in neither: the tests that need it install it into a temporary directory
# (tests/conftest.py); one an older setup left in .venv is removed.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
MODE="${1:-test}"
case "$MODE" in
  serve) VENV=.venv-serve; EXTRAS=server,telemetry,web ;;
  test) VENV=.venv; EXTRAS=test,server,telemetry,ray,parquet,plot,web,traces ;;
  *) echo "setup: unknown mode '$MODE' (serve or test)" >&2; exit 2 ;;
esac
if [ "$MODE" = test ]; then
  # The browser tests (tests/web) drive Debian's Chromium through Playwright (which downloads no
  # browser here): installed where it is missing and this user may (root, as CI runs). Best effort: a
  # busy apt lock or no network leaves it missing, and the browser tests say so.
  CHROMIUM="${TWIN_CHROMIUM:-/usr/bin/chromium}"
  if [ ! -x "$CHROMIUM" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      echo "setup: installing Debian's chromium for the browser tests (tests/web)" >&2
      { apt-get -o DPkg::Lock::Timeout=120 update -qq >/dev/null \
        && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 install -y -qq chromium >/dev/null; } \
        || echo "setup: could not install chromium (apt); the browser tests need it: apt-get install chromium" >&2
    else
      echo "setup: $CHROMIUM is missing; the browser tests need it: sudo apt-get install chromium" >&2
    fi
  fi
fi
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
# The example plugin, where an older setup installed it: not in an environment of ours (no registry needed).
if compgen -G "$VENV/lib/python*/site-packages/twin_example_dragonfly-*.dist-info" >/dev/null; then
  echo "setup: removing the example plugin (twin-example-dragonfly) from $VENV; the tests install it themselves" >&2
  "$VENV/bin/python" -m pip uninstall -q -y twin-example-dragonfly
fi
STAMP="$VENV/.fabric-twin-setup"
inputs() {
  { echo "extras $EXTRAS"
    { ls pyproject.toml setup.py MANIFEST.in 2>/dev/null
      find proto -type f -name '*.proto' 2>/dev/null
    } | LC_ALL=C sort | xargs sha256sum
  } | sha256sum | cut -d' ' -f1
}
want="$(inputs)"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && [ -x "$VENV/bin/twin" ]; then
  exit 0  # the environment matches its inputs
fi
"$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
"$VENV/bin/python" -m pip install -q -e ".[$EXTRAS]"
echo "$want" > "$STAMP"
