"""Predictions "as designed" and "as the cluster is now", divergence and the fit's inputs.

"As designed": the scenario as written. "Now": the same scenario with the fitted
calibration and the live usable fraction of each tier (twin.core.health.tier_status)
applied through :func:`twin.core.calibration.live_calibration`; downed components are
listed (never silently ignored) and priced as failover.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from twin.core.calibration import FACTORS, Observation, live_calibration
from twin.core.conditions import Conditions
from twin.core.estimate import Estimate
from twin.core.health import TierStatus
from twin.core.specs import Calibration, Scenario
from twin.engine import Engine

# Sensitivities d ln T / d ln k are measured by nudging one factor by 5% (small enough to
# stay in one regime of the model's max()/choice points, large enough to avoid noise).
NUDGE = 1.05
# Observed step time of a job: the median of its latest observations (robust to the odd
# slow step: checkpoint, evaluation, data-loader stall).
WINDOW = 16


def combine(fitted: Calibration, own: Calibration) -> Calibration:
    """The fitted live factors applied on top of the scenario's own calibration."""
    return dataclasses.replace(own, **{f: min(2.0, getattr(fitted, f) * getattr(own, f)) for f in FACTORS},
                               source=fitted.source or own.source)


def now_calibration(scenario: Scenario, fitted: Calibration, tiers: Mapping[str, TierStatus]) -> Calibration:
    """Factors of the "now" prediction: scenario x fitted x live tier capacity."""
    return live_calibration(combine(fitted, scenario.calibration), {t: s.capacity for t, s in tiers.items()})


def evaluate_with(engine: Engine, scenario: Scenario, calibration: Calibration, report: bool = True) -> Estimate:
    """Evaluate ``scenario`` with another calibration (the network's conditions as an input)."""
    return engine.evaluate(scenario, validate=False, report=report, conditions=Conditions(calibration=calibration))


def sensitivities(engine: Engine, scenario: Scenario, calibration: Calibration, base_s: float) -> dict[str, float]:
    """D ln(step) / d ln(factor) for each calibration factor, at ``calibration``."""
    out = {}
    for f in FACTORS:
        value = getattr(calibration, f)
        nudged = min(2.0, value * NUDGE)
        if nudged <= value:  # at the upper bound: nudge down instead
            nudged = value / NUDGE
        t = evaluate_with(engine, scenario, dataclasses.replace(calibration, **{f: nudged}), report=False).step_time_s
        out[f] = math.log(t / base_s) / math.log(nudged / value)
    return out


def observed_step(observations: Iterable[tuple[int, float]]) -> tuple[float, int]:
    """(median of the latest observations, how many), (0, 0) when none."""
    values = [v for _, v in list(observations)[-WINDOW:]]
    if not values:
        return 0.0, 0
    return float(statistics.median(values)), len(values)


@dataclass(frozen=True, slots=True)
class JobView:
    """One registered job's observed and predicted step."""

    job: str
    observed_s: float
    observations: int
    designed_s: float
    now_s: float

    def to_dict(self) -> dict[str, Any]:
        """Plain data, with the divergences."""
        return {"job": self.job, "observed_step_time_s": self.observed_s, "observations": self.observations,
                "predicted_designed_s": self.designed_s, "predicted_now_s": self.now_s,
                "divergence_designed": self.observed_s / self.designed_s - 1 if self.observed_s else 0.0,
                "divergence_now": self.observed_s / self.now_s - 1 if self.observed_s else 0.0}


def job_views(engine: Engine, jobs: Mapping[str, Scenario], observations: Mapping[str, Sequence[tuple[int, float]]],
              fitted: Calibration, tiers: Mapping[str, TierStatus]) -> list[JobView]:
    """Every registered job with its observed, designed and now step times."""
    out = []
    for job, scn in sorted(jobs.items()):
        obs, n = observed_step(observations.get(job, ()))
        designed = engine.evaluate(scn, validate=False, report=False).step_time_s
        now = evaluate_with(engine, scn, now_calibration(scn, fitted, tiers), report=False).step_time_s
        out.append(JobView(job, obs, n, designed, now))
    return out


def fit_inputs(engine: Engine, jobs: Mapping[str, Scenario], observations: Mapping[str, Sequence[tuple[int, float]]],
               fitted: Calibration, tiers: Mapping[str, TierStatus], min_observations: int) -> list[Observation]:
    """One :class:`Observation` per job with enough step-time points.

    The prediction compared is the "now" one, so a degraded link is not mistaken for a
    miscalibrated fabric; the sensitivities are taken with respect to the fitted factors.
    """
    out = []
    for job, scn in sorted(jobs.items()):
        obs, n = observed_step(observations.get(job, ()))
        if n < min_observations or obs <= 0:
            continue
        cal = now_calibration(scn, fitted, tiers)
        predicted = evaluate_with(engine, scn, cal, report=False).step_time_s
        out.append(Observation(job, obs, predicted, sensitivities(engine, scn, cal, predicted)))
    return out
