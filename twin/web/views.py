"""The data the step, failures and sweep pages draw, shaped from the twin's own objects.

Everything here is plain data (JSON-ready: non-finite floats become ``None``, which JSON has no
other way to say) computed from what the gRPC services compute: the telemetry service's
``predict``/``divergence``/``calibration_state`` and the failure analyzer's report.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from twin.core.estimate import Estimate
from twin.sweep.plot import PARTS
from twin.sweep.reduce import PARETO

# The parts of a step, in the order the pages stack them (twin.sweep.plot's, so a loaded rows
# file and a sweep run here draw alike). The optimizer part is the larger of the optimizer
# step and the framework's per-step host work (twin.core.step: max(optimizer_s, host_step_s)).
STEP_PARTS = PARTS


def clean(value: Any) -> Any:
    """``value`` as JSON can carry it: numpy scalars and arrays as Python, NaN and infinities as None."""
    if isinstance(value, Mapping):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [clean(v) for v in value]
    if isinstance(value, np.ndarray):
        return [clean(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def parts_of(breakdown: Mapping[str, Any]) -> dict[str, float]:
    """An estimate's breakdown (``to_dict()["breakdown"]``) as the flat parts the charts stack."""
    ex = breakdown.get("exposed_comm_s") or {}
    known = ("tp", "cp", "ep", "dp", "pp")
    out = {"compute_s": breakdown.get("compute_s", 0.0), "recompute_s": breakdown.get("recompute_s", 0.0)}
    for dim in known:
        out[f"exposed_{dim}_s"] = float(ex.get(dim, 0.0))
    out["exposed_other_s"] = float(sum(v for k, v in ex.items() if k not in known))
    out["bubble_s"] = breakdown.get("bubble_s", 0.0)
    out["optimizer_s"] = breakdown.get("optimizer_s", 0.0)
    out["offload_s"] = breakdown.get("offload_s", 0.0)
    out["interference_s"] = breakdown.get("overlap_interference_s", 0.0)
    return {k: float(v) for k, v in out.items()}


def step_view(predicted: Mapping[str, Any], divergence: Sequence[Mapping[str, Any]], job: str,
              calibration: Mapping[str, Any], history: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The Step page: designed and now with their parts, the job's observations against the
    predictions over time (``history``: samples the web view took as telemetry arrived), calibration.
    """
    row = next((d for d in divergence if d.get("job") == job), {})
    designed, now = predicted.get("designed") or {}, predicted.get("now") or {}
    return clean({
        "job": job,
        "designed_step_time_s": predicted.get("designed_step_time_s"),
        "now_step_time_s": predicted.get("now_step_time_s"),
        "slowdown": predicted.get("slowdown"),
        "designed_interval": designed.get("interval"),
        "now_interval": now.get("interval"),
        "parts": [{"key": k, "label": label, "designed": parts_of(designed.get("breakdown") or {})[k],
                   "now": parts_of(now.get("breakdown") or {})[k]} for k, label in STEP_PARTS],
        "now_calibration": predicted.get("now_calibration"),
        "down_components": predicted.get("down_components", []),
        "degraded_components": predicted.get("degraded_components", []),
        "tiers": predicted.get("tiers", []),
        "notes": predicted.get("notes", []),
        "observed_step_time_s": row.get("observed_step_time_s"),
        "observations": row.get("observations", 0),
        "divergence_now": row.get("divergence_now"),
        "divergence_designed": row.get("divergence_designed"),
        "history": list(history),
        "calibration": calibration.get("calibration"),
        "calibration_history": calibration.get("history", []),
    })


def failures_view(report: Mapping[str, Any]) -> dict[str, Any]:
    """The Failures page from a failure report (``FailureReport.to_dict()``)."""
    keep = ("scenario", "num_gpus", "step_time_s", "expected_interruptions_per_day",
            "mean_time_between_interruptions_h", "effective_training_time_pct", "optimal_checkpoint_interval_s",
            "goodput_tokens_per_s", "time_lost_pct", "formula", "notes", "degraded_events_per_day",
            "planned_interruptions_per_day", "planned_source")
    out = {k: report.get(k) for k in keep}
    out["ranking"] = [{k: r.get(k) for k in ("component", "kind", "fabric", "count", "events_per_day",
                                             "expected_cost_h_per_day", "share_pct", "cost_per_event_s",
                                             "outcome", "slowdown", "worst_mode")}
                      for r in report.get("ranking") or []]
    out["redundancy"] = [{k: r.get(k) for k in ("variant", "description", "effective_training_time_pct",
                                                "delta_ett_pct_points", "expected_interruptions_per_day",
                                                "goodput_gain_pct", "goodput_per_gpu_owned_gain_pct")}
                         for r in report.get("redundancy") or []]
    return clean(out)


def row_of(index: int, assignment: Mapping[str, Any], estimate: Estimate | None, error: str = "") -> dict[str, Any]:
    """One sweep point as a table row: its axis values, the headline metrics and the step's parts."""
    row: dict[str, Any] = {"point_id": index, **{f"axis:{k}": v for k, v in assignment.items()}}
    if estimate is None:
        row.update({"feasible": False, "reason": error})
        return clean(row)
    mem = estimate.memory.as_gib()
    power = estimate.energy.average_power_w if estimate.energy is not None else None
    gpus = estimate.tokens_per_s / estimate.tokens_per_s_per_gpu if estimate.tokens_per_s_per_gpu else None
    row.update({"feasible": bool(estimate.fits), "reason": estimate.memory.verdict(),
                "num_gpus": round(gpus) if gpus else None,
                "step_time_s": estimate.step_time_s, "tokens_per_s": estimate.tokens_per_s, "mfu": estimate.mfu,
                "memory_gib": mem.get("total_gib"), "power_kw": power / 1e3 if power else None,
                **parts_of(dataclasses.asdict(estimate.breakdown))})
    return clean(row)


def rows_from_columns(rows: Mapping[str, np.ndarray], axes: Sequence[str]) -> list[dict[str, Any]]:
    """Table rows from a rows file's columns (``twin sweep --out``: ``twin.sweep.output.read_rows``)."""
    n = len(next(iter(rows.values()))) if rows else 0
    cols = [c for c in rows if c not in axes]
    out = []
    for i in range(n):
        r: dict[str, Any] = {f"axis:{a}": rows[a][i] for a in axes if a in rows}
        r.update({c: rows[c][i] for c in cols})
        out.append(clean(r))
    return out


# Series a scatter can still tell apart by colour and marker (the page's palette has 12 colours).
MAX_GROUPS = 12


def pareto_label(value: Any) -> str:
    """A group's name on the Pareto plot: the axis value as text."""
    return json.dumps(value, separators=(",", ":")) if isinstance(value, dict | list) else str(value)


def pareto_group(rows: Sequence[Mapping[str, Any]]) -> str | None:
    """The axis the Pareto plot colours its points by: the first axis whose values are not numbers
    (a fabric, a system, a schedule) with 2 to ``MAX_GROUPS`` values; None when there is none.
    """
    for key in (k for r in rows[:1] for k in r if k.startswith("axis:")):
        values = {pareto_label(r.get(key)) for r in rows}
        numeric = all(isinstance(r.get(key), int | float) and not isinstance(r.get(key), bool) for r in rows)
        if not numeric and 2 <= len(values) <= MAX_GROUPS:
            return key
    return None


def plots(rows: Sequence[Mapping[str, Any]], metric: str = "step_time_s") -> dict[str, Any]:
    """What the three sweep plots draw: Pareto (throughput vs power, the front marked), the step
    parts of the ten best points, and scaling (best throughput per GPU count, or per the first
    numeric axis when the GPU count does not vary).
    """
    ok = [r for r in rows if r.get("feasible") and isinstance(r.get(PARETO[0]), int | float)]
    # Pareto: max throughput, min power (twin.sweep.reduce.pareto_rows, same order and rule).
    pts = sorted((r for r in ok if isinstance(r.get(PARETO[1]), int | float)),
                 key=lambda r: (r[PARETO[1]], -r[PARETO[0]], r.get("point_id", 0)))
    front, best = [], -math.inf
    for r in pts:
        if r[PARETO[0]] > best:
            front.append(r["point_id"])
            best = r[PARETO[0]]
    reverse = metric in ("tokens_per_s", "mfu")
    ranked = sorted((r for r in ok if isinstance(r.get(metric), int | float)),
                    key=lambda r: r[metric], reverse=reverse)[:10]
    x_key = "num_gpus" if len({r.get("num_gpus") for r in ok}) > 1 else next(
        (k for r in ok[:1] for k, v in r.items() if k.startswith("axis:") and isinstance(v, int | float)
         and not isinstance(v, bool)), None)
    scaling: dict[Any, float] = {}
    if x_key is not None:
        for r in ok:
            x = r.get(x_key)
            if isinstance(x, int | float):
                scaling[x] = max(scaling.get(x, -math.inf), r[PARETO[0]])
    group = pareto_group(pts)
    return clean({
        "pareto": {"x": PARETO[1], "y": PARETO[0], "group": group,
                   "points": [[r.get(PARETO[1]), r[PARETO[0]], r["point_id"],
                               pareto_label(r.get(group)) if group else ""] for r in pts], "front": front},
        "breakdown": {"parts": [{"key": k, "label": label} for k, label in STEP_PARTS],
                      "points": [{"point_id": r["point_id"], **{k: r.get(k, 0.0) for k, _ in STEP_PARTS}}
                                 for r in ranked]},
        "scaling": {"x": x_key, "y": PARETO[0], "points": sorted([x, y] for x, y in scaling.items())},
    })
