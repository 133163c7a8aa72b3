"""Score a reference file of either schema: training runs (``twin-reference-cases/v1``)
or collectives (``twin-reference-collectives/v1``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from twin.core.errors import SpecError
from twin.core.scenario_io import read_mapping
from twin.engine import Engine
from twin.reference.case_report import Report
from twin.reference.collective_validation import validate_collectives
from twin.reference.training_validation import validate_training

TRAINING_SCHEMA = "twin-reference-cases/v1"
COLLECTIVES_SCHEMA = "twin-reference-collectives/v1"


def validate_file(engine: Engine, path: str | Path) -> Report:
    """Score a reference file of either schema; SpecError if it is malformed."""
    data = read_mapping(path)
    if not isinstance(data, Mapping) or not isinstance(data.get("cases"), list):
        raise SpecError(str(path), "must be a mapping with a 'cases' list")
    kind = data.get("schema")
    if kind == TRAINING_SCHEMA:
        return validate_training(engine, data)
    if kind == COLLECTIVES_SCHEMA:
        return validate_collectives(engine, data)
    raise SpecError(f"{path}: schema", f"must be {TRAINING_SCHEMA!r} or {COLLECTIVES_SCHEMA!r} (got {kind!r})")
