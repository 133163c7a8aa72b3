"""Built-in presets (package data): GPUs, efficiency profiles, systems, models and
software stacks.

Registered as the built-in plugin ``presets`` through the ``twin_presets`` hook, the same
way a third-party package adds its own hardware or models.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import yaml

from twin.hookimpl import hookimpl

_FILES = {"gpus": ("gpus.yaml", "gpus"), "efficiency": ("efficiency.yaml", "profiles"),
          "systems": ("systems.yaml", "systems"), "models": ("models.yaml", "models"),
          "software": ("software.yaml", "software")}


def builtin_presets() -> dict[str, dict[str, dict[str, Any]]]:
    """The shipped presets by kind."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    root = resources.files(__name__)
    for kind, (fname, key) in _FILES.items():
        data = yaml.safe_load(root.joinpath(fname).read_text(encoding="utf-8"))
        out[kind] = data[key]
    return out


def interval_table() -> dict[str, Any]:
    """The prediction-interval table (``intervals.yaml``, written by ``validation/intervals.py``)."""
    text = resources.files(__name__).joinpath("intervals.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)  # type: ignore[no-any-return]


@hookimpl
def twin_presets() -> dict[str, dict[str, dict[str, Any]]]:
    """Contribute the built-in presets."""
    return builtin_presets()
