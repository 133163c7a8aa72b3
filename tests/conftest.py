"""Shared fixtures: one engine with the built-in plugins only (autoload off), and the example
third-party plugin package (tests/example_plugin) installed for the tests that need it.

The example plugin is never installed into the environment the suite runs in (that is the
serving environment, .venv, which scripts/run.sh serves from): ``example_plugin`` installs it
once per session into a temporary directory and puts that directory on ``sys.path`` (and on
``PYTHONPATH`` for subprocesses) for one test at a time, so tests after it do not see it.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

from twin.engine import Engine

ROOT = Path(__file__).resolve().parent.parent


def validation_script(name: str) -> ModuleType:
    """``validation/<name>.py`` loaded as a module (the folder is scripts, not a package)."""
    path = ROOT / "validation" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module
EXAMPLES = ROOT / "examples"
REFERENCE = ROOT / "validation" / "reference"
EXAMPLE_PLUGIN = ROOT / "tests" / "example_plugin"
EXAMPLE_DIST = "twin-example-dragonfly"


@pytest.fixture(scope="session")
def engine() -> Engine:
    return Engine(autoload=False)


def base_scenario(**plan: object) -> dict:
    """A small, valid scenario mapping; plan fields override."""
    p = {"tp": 8, "pp": 2, "gbs": 256, "mbs": 1}
    p.update(plan)
    return {"name": "t", "cluster": {"system": "DGX-H100", "num_gpus": 128}, "model": "llama3.1-70b", "plan": p}


@dataclass(frozen=True)
class ExamplePlugin:
    """The example plugin package, installed in ``site`` (a temporary directory, not .venv)."""

    site: Path

    def env(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        """``env`` (default: this process's) with ``site`` first on ``PYTHONPATH``, for a subprocess."""
        out = dict(os.environ if env is None else env)
        out["PYTHONPATH"] = os.pathsep.join(p for p in (str(self.site), out.get("PYTHONPATH", "")) if p)
        return out


@contextmanager
def example_plugin_on_path(site: Path) -> Iterator[ExamplePlugin]:
    """``site`` first on ``sys.path`` for the block: ``importlib.metadata`` (so pluggy's
    ``load_setuptools_entrypoints``, hence ``Engine(autoload=True)``) finds its dist-info and the
    modules import. After the block the path is gone and the modules imported from it are
    forgotten; objects taken from them inside the block stay usable.
    """
    path = str(site)
    sys.path.insert(0, path)
    importlib.invalidate_caches()
    try:
        yield ExamplePlugin(site)
    finally:
        sys.path.remove(path)
        for name, module in list(sys.modules.items()):
            file = getattr(module, "__file__", None)
            if file and Path(file).is_relative_to(site):
                del sys.modules[name]
        importlib.invalidate_caches()


@pytest.fixture(scope="session")
def example_plugin_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/example_plugin installed once per session into a temporary directory (``pip
    --target``), built from a copy so no build/ or egg-info is left in the source tree. No
    package registry is asked: no dependencies, no build isolation (the build backend,
    setuptools, is in the test environment already: grpcio-tools of the test extra requires it).
    """
    root = tmp_path_factory.mktemp("example-plugin")
    src, site = root / "src", root / "site"
    shutil.copytree(EXAMPLE_PLUGIN, src, ignore=shutil.ignore_patterns(
        "build", "*.egg-info", "__pycache__", "conftest.py", "test_*.py"))
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
           "--no-build-isolation", "--no-index", "--target", str(site), str(src)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        pytest.fail(f"installing the example plugin failed ({done.returncode}): {' '.join(cmd)}\n"
                    f"{done.stdout}{done.stderr}", pytrace=False)
    return site


@pytest.fixture
def example_plugin(example_plugin_site: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ExamplePlugin]:
    """The example plugin installed for this test: on ``sys.path`` (entry point and imports) and on
    ``PYTHONPATH`` for subprocesses that inherit the environment (``.env(...)`` builds an explicit
    one); both are taken away again after the test.
    """
    with example_plugin_on_path(example_plugin_site) as installed:
        monkeypatch.setenv("PYTHONPATH", installed.env()["PYTHONPATH"])
        yield installed
