"""A wide set of scenarios, for checking that a change to the serving path
(``twin.wire.convert``, ``TwinServicer``) gives byte-identical replies (tests/server/test_wire_bytes.py).

The scenarios: every ``examples/*.yaml`` and every preset model on every preset system (a
small plan that some fit and some do not), and one example with prices (for the cost).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from twin.engine import Engine

ROOT = Path(__file__).resolve().parents[2]


def scenarios(engine: Engine) -> Iterator[tuple[str, dict[str, Any]]]:
    """(label, scenario mapping) for every example and every preset model x system."""
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        yield path.name, yaml.safe_load(path.read_text())
    # No example sets prices, so one priced copy gives the message's cost part (test inputs,
    # not real prices: the bytes are what is checked, not the figures).
    priced = yaml.safe_load((ROOT / "examples" / "energy-h100-1024.yaml").read_text())
    priced["cluster"]["prices"] = {"usd_per_gpu_hour": 2.0, "usd_per_kwh": 0.1}
    yield "energy-h100-1024.yaml+prices", priced
    doc = engine.catalog_document()
    for system in doc["systems"]:
        per_node = system["spec"]["gpus_per_node"]
        for model in doc["models"]:
            yield f"{model['name']}@{system['name']}", {
                "name": f"{model['name']}@{system['name']}",
                "cluster": {"system": system["name"], "num_gpus": 16 * per_node},
                "model": model["name"], "plan": {"tp": min(8, per_node), "pp": 2, "gbs": 256}}
