"""Evaluation as the server runs it: numeric blow-ups of extreme input are bad input, not crashes.

The core checks each number against its bounds (finite, > 0, <= 1 ...), but a value can
be in bounds and still outside what double precision can carry through the model: a
bandwidth fraction of 1e-308 times a calibration factor of 1e-308 underflows to 0 and a
division by it raises ZeroDivisionError; an oversubscription of 1e300 overflows. Those
are answers to absurd questions, so the client gets INVALID_ARGUMENT saying so (and the
log keeps the traceback at WARNING for whoever tightens the core's bounds), never INTERNAL.
"""

from __future__ import annotations

import logging

from twin.core.errors import SpecError
from twin.core.estimate import Estimate
from twin.core.specs import Scenario
from twin.engine import Engine

log = logging.getLogger("twin.server")


def evaluate(engine: Engine, scenario: Scenario, *, report: bool = True) -> Estimate:
    """``Engine.evaluate`` of a validated scenario, arithmetic failures as SpecError."""
    try:
        return engine.evaluate(scenario, validate=False, report=report)
    except ArithmeticError as err:
        log.warning("arithmetic failure on an in-bounds scenario", exc_info=err,
                    extra={"scenario": scenario.name, "error": type(err).__name__})
        raise SpecError("scenario", f"some value is outside the numeric range the model can compute "
                                    f"({type(err).__name__}: {err}); look for fractions, bandwidths or factors "
                                    "near 0 or ratios near 1e308") from err
