"""Predictions "as designed" and "as the cluster is now", divergence and the fit's inputs.

"As designed": the scenario as written. "Now": the same scenario with the fitted
calibration and the job's own live conditions (:mod:`twin.telemetry.job_live`: faults by
kind, :mod:`twin.core.fault_kinds`): bandwidth lost through
:func:`twin.core.calibration.live_calibration`, a straggler as the slowest GPU's compute;
interruptions are a goodput cost, listed, never a slower step.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from twin.core.calibration import FACTORS, Observation, live_calibration
from twin.core.conditions import Conditions, Impact
from twin.core.estimate import Estimate
from twin.core.specs import Calibration, Scenario
from twin.engine import Engine
from twin.telemetry.job_live import JobLive

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


def now_calibration(scenario: Scenario, fitted: Calibration, bandwidth: Mapping[str, float]) -> Calibration:
    """Factors of the "now" prediction: scenario x fitted x the job's live bandwidth per tier
    (``scale_up``/``scale_out``; compute is a straggler, :func:`now_conditions`).
    """
    return live_calibration(combine(fitted, scenario.calibration), bandwidth)


def now_conditions(scenario: Scenario, fitted: Calibration, live: JobLive) -> Conditions:
    """The job's "now": its live bandwidth in the calibration, its slowest GPU as the devices."""
    cal = now_calibration(scenario, fitted, live.bandwidth)
    if live.compute >= 1.0:
        return Conditions(calibration=cal)
    by = live.limited_by.get("compute", "")
    return Conditions(calibration=cal, impact=Impact(compute=live.compute,
                                                     note=f"straggler {by} at {100 * live.compute:.0f}% clocks"))


def evaluate_with(engine: Engine, scenario: Scenario, calibration: Calibration | Conditions,
                  report: bool = True) -> Estimate:
    """Evaluate ``scenario`` with another calibration, or other conditions (the network as an input)."""
    cond = calibration if isinstance(calibration, Conditions) else Conditions(calibration=calibration)
    return engine.evaluate(scenario, validate=False, report=report, conditions=cond)


def compute_ceiling(scenario: Scenario) -> float:
    """Highest fitted compute factor that keeps the scenario physical: GEMMs at the SKU's
    kernel-level measured fraction (``sustained`` x factor <= 1, ``twin.core.compute.device_for``;
    the GEMM figures are measurements, twin/presets/efficiency.yaml), over its own calibration.
    """
    eff = scenario.cluster.gpu.efficiency
    sustained = eff.sustained if eff is not None and eff.sustained > 0 else 1.0
    return 1.0 / sustained / scenario.calibration.compute_efficiency


def sensitivities(engine: Engine, scenario: Scenario, calibration: Calibration, base_s: float) -> dict[str, float]:
    """D ln(step) / d ln(factor) for each calibration factor, at ``calibration``."""
    out = {}
    for f in FACTORS:
        value = getattr(calibration, f)
        nudged = min(2.0, value * NUDGE)
        if nudged <= value:  # at the upper bound: nudge down instead
            nudged = value / NUDGE
        t = evaluate_with(engine, scenario, dataclasses.replace(calibration, **{f: nudged}),
                          report=False).step_time_s
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
              fitted: Calibration, lives: Mapping[str, JobLive]) -> list[JobView]:
    """Every registered job with its observed, designed and now step times."""
    out = []
    for job, scn in sorted(jobs.items()):
        obs, n = observed_step(observations.get(job, ()))
        designed = engine.evaluate(scn, validate=False, report=False).step_time_s
        now = evaluate_with(engine, scn, now_conditions(scn, fitted, lives[job]), report=False).step_time_s
        out.append(JobView(job, obs, n, designed, now))
    return out


def skip_reason(live: JobLive, steps: int, min_observations: int) -> str:
    """Why a job's steps may not teach the calibration now ("" when they may).

    The fit learns only what the twin cannot explain: while one of the job's own parts is
    faulty (or still settling) its steps measure the fault, and without a placement the twin
    does not know which faults are the job's.
    """
    if not live.placement_known:
        return "placement unknown: register the job with placement hosts or a selector"
    if not live.parts:
        return "no telemetry from the job's placement yet"
    if not live.healthy:
        bad = [f.component for f in live.faults if f.consequence != "none"] + list(live.down) + \
            list(live.degraded) + list(live.unsettled)
        shown = sorted(set(bad))
        return f"its own parts are not healthy: {', '.join(shown[:5])}" + (
            f" and {len(shown) - 5} more" if len(shown) > 5 else "")
    if steps < min_observations:
        return f"{steps} step(s) observed since its parts were last healthy; the fit needs {min_observations}"
    return ""


def fit_inputs(engine: Engine, jobs: Mapping[str, Scenario], observations: Mapping[str, Sequence[tuple[int, float]]],
               fitted: Calibration, lives: Mapping[str, JobLive],
               min_observations: int) -> tuple[list[Observation], dict[str, str], float]:
    """One :class:`Observation` per job the fit may learn from, why each other job is skipped
    (:func:`skip_reason`), and the highest compute factor the jobs used allow (:func:`compute_ceiling`).

    Only steps observed since the job's parts were last all healthy count; the prediction
    compared is the "now" one (healthy, so the fitted factors on the design); the
    sensitivities are taken with respect to the fitted factors.
    """
    out, skipped, ceiling = [], {}, 2.0
    for job, scn in sorted(jobs.items()):
        live = lives[job]
        since = [(t, v) for t, v in observations.get(job, ()) if t >= live.healthy_since_ns]
        obs, n = observed_step(since)
        reason = skip_reason(live, n if obs > 0 else 0, min_observations)
        if reason:
            skipped[job] = reason
            continue
        cal = now_calibration(scn, fitted, live.bandwidth)
        predicted = evaluate_with(engine, scn, cal, report=False).step_time_s
        out.append(Observation(job, obs, predicted, sensitivities(engine, scn, cal, predicted)))
        ceiling = min(ceiling, compute_ceiling(scn))
    return out, skipped, ceiling
