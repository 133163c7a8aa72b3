"""The example plugin (tests/example_plugin) lives only where the tests install it.

The serving environment (.venv, which scripts/run.sh serves from and the suite runs in) has no
example plugin: ``twin serve``/``twin predict`` load twin's own plugins only. The tests that
need it take the ``example_plugin`` fixture (tests/conftest.py), which installs it into a
temporary directory for one test at a time. The tests below run in file order: the fixture's
test, then one that finds the default set again in the same process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from tests.conftest import EXAMPLE_DIST, ROOT
from twin.engine import Engine

FABRIC = "example-dragonfly"                 # the example's fabric kind and its entry-point name
STRATEGY = "example-compressed-pp"           # the example's alternative pp strategy
CLEAN_ENV = {"PATH": "/usr/bin:/bin"}        # no PYTHONPATH, no TWIN_DISABLE_PLUGIN_AUTOLOAD, no blocks


def _pythons() -> list[str]:
    """The serving environment's python (.venv, where present) and the one running the tests."""
    serving = ROOT / ".venv" / "bin" / "python"
    out = [str(serving)] if serving.exists() else []
    if Path(sys.prefix).resolve() != (ROOT / ".venv").resolve():
        out.append(sys.executable)
    return out


def _plugins_json(python: str, env: dict[str, str], cwd: Path) -> dict:
    done = subprocess.run([python, "-m", "twin.cli", "plugins", "--json"], capture_output=True, text=True,
                          timeout=120, env=env, cwd=cwd, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _example_parts(listing: dict) -> set[str]:
    """Everything in a ``twin plugins --json`` listing that comes from the example package."""
    parts = {f"plugin {p['name']}" for p in listing["plugins"]
             if p["distribution"] == EXAMPLE_DIST or p["name"] == FABRIC}
    for role, rows in listing["components"].items():
        parts |= {f"{role} {r['kind']}" for r in rows if r["plugin"] == FABRIC or r["kind"] in (FABRIC, STRATEGY)}
    return parts


def test_the_serving_environment_has_no_example_plugin(tmp_path):
    for python in _pythons():
        listing = _plugins_json(python, CLEAN_ENV, tmp_path)
        assert _example_parts(listing) == set(), (python, _example_parts(listing))
        found = subprocess.run([python, "-c", f"import importlib.metadata as m; m.distribution({EXAMPLE_DIST!r})"],
                               capture_output=True, text=True, timeout=60, env=CLEAN_ENV, cwd=tmp_path, check=False)
        assert found.returncode != 0 and "PackageNotFoundError" in found.stderr, (python, found.stderr)


def test_the_fixture_installs_it_in_a_temporary_directory(example_plugin, tmp_path):
    site = example_plugin.site.resolve()
    assert not site.is_relative_to(ROOT.resolve()) and not site.is_relative_to(Path(sys.prefix).resolve())
    assert Path(metadata.distribution(EXAMPLE_DIST).locate_file("")).resolve() == site
    # In this process: the entry point is found and its fabric and strategy are loaded.
    engine = Engine(autoload=True)
    assert {i.name: i.distribution for i in engine.plugins()}[FABRIC] == EXAMPLE_DIST
    assert FABRIC in engine.fabrics.kinds()["scale_out"]
    assert STRATEGY in {s.name for s in engine.strategies}
    # In a subprocess (a CLI or server a test starts): through PYTHONPATH.
    listing = _plugins_json(sys.executable, example_plugin.env(CLEAN_ENV), tmp_path)
    assert _example_parts(listing) >= {f"plugin {FABRIC}", f"scale_out {FABRIC}", f"strategy {STRATEGY}"}


def test_after_the_fixture_the_default_set_is_back():
    """Runs after the test above in the same process: nothing of the example is left."""
    loaded, builtin = Engine(autoload=True), Engine(autoload=False)
    assert FABRIC not in {i.name for i in loaded.plugins()}, (
        "the example plugin is visible without the fixture: is it installed in this environment, or is "
        "there a stale tests/example_plugin/*.egg-info (git clean -fdX tests/example_plugin)?")
    assert {s.name for s in loaded.strategies} == {s.name for s in builtin.strategies}
    assert STRATEGY not in {s.name for s in loaded.strategies}
    assert loaded.fabrics.kinds() == builtin.fabrics.kinds()
    assert not [m for m in sys.modules if m.startswith("twin_example_dragonfly")
                and str(ROOT) not in (getattr(sys.modules[m], "__file__", None) or "")]
