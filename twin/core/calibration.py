"""Live calibration: fit the twin's efficiency factors to observed step times.

The model's step time T depends on three multiplicative factors of
:class:`~twin.core.specs.Calibration` (compute efficiency, scale-up and scale-out
achieved bandwidth). For each observed job j the adapter supplies the observed step
time, the prediction at the current factors, and the sensitivities
``s_jx = d ln T_j / d ln k_x`` (negative: a faster resource shortens the step; measured
by re-evaluating the model with one factor nudged). Linearising
``ln T_j(k e^d) ~ ln T_j(k) + sum_x s_jx d_x``, the adjustment ``d`` minimises

    sum_j w_j (r_j - sum_x s_jx d_x)^2 + ridge * sum_x d_x^2,   r_j = ln(observed_j / predicted_j)

(ridge/Tikhonov-regularised least squares, one Gauss-Newton step): with one job it
moves each factor in proportion to how much of the step that factor explains; with
several jobs of different mixes (compute-bound, communication-bound) it separates them;
the ridge term keeps a factor no observation informs at its current value. Every step
is bounded (``max_step``: at most 10% per update by default) and every factor is kept in
``[min_factor, max_factor]`` (the compute factor also under its physical ceiling, the
caller's ``upper``); a job informs only the factors that explain a fair share of its step
(``identify``): beyond those the model is wrong, not miscalibrated, and the
divergence is reported rather than absorbed. Small divergences (``deadband``) are left
alone so noise does not churn the factors. Each change is an :class:`Adjustment` with
its reason, kept as history by the caller.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from twin.core.specs import Calibration

FACTORS = ("compute_efficiency", "scale_up_bandwidth", "scale_out_bandwidth")
# Which calibration factor a tier's live capacity scales.
TIER_FACTOR = {"compute": "compute_efficiency", "scale_up": "scale_up_bandwidth",
               "scale_out": "scale_out_bandwidth"}


@dataclass(frozen=True, slots=True)
class FitSettings:
    """Bounds of the fit. Defaults are choices, explained in the module docstring.

    ``deadband`` 2%: below run-to-run step-time noise of large jobs (Llama 3 paper §3.3.4
    reports step-to-step variation of a few percent); ``ridge`` 0.05: a factor explaining
    less than ~5% of the step (s^2 < ridge) barely moves. ``identify`` 0.2: a job informs a factor
    only when that factor explains at least 20% of its step (|s| >= 0.2): with step-time noise
    of the deadband's 2%, a factor explaining s of the step is known to 2%/s, i.e. to 10% (the
    largest step) at s = 0.2; below it the job's divergence says nothing about that factor.
    """

    max_step: float = 0.10
    min_factor: float = 0.25
    max_factor: float = 2.0
    deadband: float = 0.02
    ridge: float = 0.05
    identify: float = 0.2


@dataclass(frozen=True, slots=True)
class Observation:
    """One job's evidence for the fit."""

    job: str
    observed_s: float
    predicted_s: float
    sensitivity: Mapping[str, float]
    weight: float = 1.0

    @property
    def residual(self) -> float:
        """ln(observed / predicted): positive when the cluster is slower than predicted."""
        return math.log(self.observed_s / self.predicted_s)


@dataclass(frozen=True, slots=True)
class Adjustment:
    """One bounded change of one factor, with the reason in words."""

    factor: str
    old: float
    new: float
    reason: str


def fit(current: Calibration, observations: Sequence[Observation], settings: FitSettings = FitSettings(),
        upper: Mapping[str, float] | None = None) -> tuple[Calibration, list[Adjustment]]:
    """The next calibration and the adjustments that lead to it (empty: no change).

    ``upper``: a tighter upper bound per factor (the compute factor's physical ceiling); a
    current value beyond its bound is brought back to it first, with the reason.
    """
    high = {f: min(settings.max_factor, (upper or {}).get(f, settings.max_factor)) for f in FACTORS}
    clamped = _clamped(current, high, settings.min_factor)
    current, pre = clamped if clamped is not None else (current, [])
    obs = [o for o in observations if o.observed_s > 0 and o.predicted_s > 0 and o.weight > 0]
    if not obs or all(abs(o.residual) < settings.deadband for o in obs):
        return current, pre
    S = np.array([[o.sensitivity.get(f, 0.0) for f in FACTORS] for o in obs])
    S[np.abs(S) < settings.identify] = 0.0  # a job does not inform a factor that explains little of its step
    r = np.array([o.residual for o in obs])
    w = np.array([o.weight for o in obs])
    lhs = S.T @ (S * w[:, None]) + settings.ridge * np.eye(len(FACTORS))
    delta = np.linalg.solve(lhs, S.T @ (w * r))
    limit = math.log1p(settings.max_step)
    summary = "; ".join(f"{o.job}: observed {o.observed_s:.4g} s vs predicted {o.predicted_s:.4g} s "
                        f"({100 * (o.observed_s / o.predicted_s - 1):+.1f}%)" for o in obs)
    adjustments: list[Adjustment] = []
    values: dict[str, float] = {}
    for i, name in enumerate(FACTORS):
        d = float(delta[i])
        old = float(getattr(current, name))
        clipped = max(-limit, min(limit, d))
        new = min(high[name], max(settings.min_factor, old * math.exp(clipped)))
        if abs(new / old - 1) < 1e-4:
            continue
        share = max((-float(S[j, i]) for j in range(len(obs))), default=0.0)
        notes = []
        if clipped != d:
            notes.append(f"limited to {100 * settings.max_step:.0f}% per update (fit wanted {math.exp(d) - 1:+.1%})")
        if new in (settings.min_factor, high[name]):
            notes.append(f"held at its bound {new:g}: the model, not the calibration, needs attention")
        reason = (f"{summary}; {name} explains up to {100 * share:.0f}% of the step -> "
                  f"{old:.4f} -> {new:.4f}" + (f" ({'; '.join(notes)})" if notes else ""))
        adjustments.append(Adjustment(name, old, new, reason))
        values[name] = new
    if not adjustments:
        return current, pre
    return replace(current, **values, source="live telemetry fit"), pre + adjustments


def _clamped(current: Calibration, high: Mapping[str, float],
             low: float) -> tuple[Calibration, list[Adjustment]] | None:
    """``current`` within its bounds, and the adjustments that brought it there (None: it was)."""
    values, made = {}, []
    for name in FACTORS:
        old = float(getattr(current, name))
        new = min(high[name], max(low, old))
        if new != old:
            values[name] = new
            made.append(Adjustment(name, old, new, f"{name} {old:.4f} is outside its physical bounds "
                                                   f"[{low:g}, {high[name]:.4g}] -> {new:.4f}"))
    return (replace(current, **values, source="live telemetry fit"), made) if made else None


def live_calibration(calibration: Calibration, capacity: Mapping[str, float]) -> Calibration:
    """The calibration of "the cluster as it is now": fitted factors times tier capacities.

    ``capacity``: usable fraction per tier (``compute``/``scale_up``/``scale_out``), from
    :func:`twin.core.health.tier_status`. Factors stay inside the spec's (0, 2] range.
    """
    values = {}
    for tier, factor in TIER_FACTOR.items():
        frac = float(capacity.get(tier, 1.0))
        values[factor] = min(2.0, max(1e-3, float(getattr(calibration, factor)) * frac))
    return replace(calibration, **values, source=(calibration.source + " + live link state").strip(" +"))
