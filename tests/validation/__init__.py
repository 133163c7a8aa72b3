"""Tests of the validation scripts and of the twin against the reference runs."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from tests.conftest import ROOT


def load_script(name: str) -> ModuleType:
    """Import ``validation/<name>.py`` (a script, not a package module) by its path."""
    path = ROOT / "validation" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module
