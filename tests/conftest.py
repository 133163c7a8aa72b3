"""Shared fixtures: one engine with the built-in plugins only (autoload off)."""

from __future__ import annotations

from pathlib import Path

import pytest

from twin.engine import Engine

ROOT = Path(__file__).resolve().parent.parent
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
