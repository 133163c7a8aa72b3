"""Shared fixtures: one engine with the built-in plugins only (autoload off)."""

from __future__ import annotations

import importlib.util
import sys
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


@pytest.fixture(scope="session")
def engine() -> Engine:
    return Engine(autoload=False)


def base_scenario(**plan: object) -> dict:
    """A small, valid scenario mapping; plan fields override."""
    p = {"tp": 8, "pp": 2, "gbs": 256, "mbs": 1}
    p.update(plan)
    return {"name": "t", "cluster": {"system": "DGX-H100", "num_gpus": 128}, "model": "llama3.1-70b", "plan": p}
