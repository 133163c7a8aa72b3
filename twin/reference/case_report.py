"""The scores of one reference file: each case's prediction against its measurement
(:class:`CaseResult`), and the file's :class:`Report` with the median and p90 absolute
error, overall and per family.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

MEMORY_MISS = ("memory-model miss: the published plan does not fit by the twin's count under any setting the case "
               "leaves open (predicted with the one that needs the least memory)")
# The note of a case whose plan fits only with a memory policy the reader assumed (fit_policies).
POLICY_ASSUMED = "the plan as read does not fit in memory:"


@dataclass
class CaseResult:
    """One scored case."""

    id: str
    family: str
    predicted: float
    measured: float
    metric: str
    notes: list[str] = field(default_factory=list)
    plan: dict[str, Any] = field(default_factory=dict)
    points: list[dict[str, Any]] = field(default_factory=list)
    nodes: int | None = None  # nodes the measured group spans (collectives); None: not recorded
    # Peak memory per GPU, GiB: the twin's count for the chosen plan and the published figure
    # (measured.peak_memory_gib); None where the case publishes none.
    memory_predicted_gib: float | None = None
    memory_measured_gib: float | None = None

    @property
    def memory_error_pct(self) -> float | None:
        """Signed percentage error of the memory count, where the case publishes its memory."""
        if self.memory_measured_gib is None or self.memory_predicted_gib is None:
            return None
        return (self.memory_predicted_gib - self.memory_measured_gib) / self.memory_measured_gib * 100.0

    @property
    def error_pct(self) -> float:
        """Signed percentage error of the prediction."""
        return (self.predicted - self.measured) / self.measured * 100.0


@dataclass
class Report:
    """All scored and skipped cases of one file."""

    kind: str
    cases: list[CaseResult]
    skipped: list[dict[str, str]]

    def summary(self) -> dict[str, Any]:
        """Count, median and p90 of absolute % error, overall and per family."""
        def stats(rows: Iterable[CaseResult]) -> dict[str, Any]:
            errs = sorted(abs(r.error_pct) for r in rows)
            return {"n": len(errs), "median_abs_error_pct": _quantile(errs, 0.5),
                    "p90_abs_error_pct": _quantile(errs, 0.9)}

        families: dict[str, list[CaseResult]] = {}
        for r in self.cases:
            families.setdefault(r.family, []).append(r)
        out = stats(self.cases)
        out["skipped"] = list(self.skipped)
        out["memory_misses"] = [r.id for r in self.cases if MEMORY_MISS in r.notes]
        out["fit_policies_assumed"] = {r.id: n for r in self.cases for n in r.notes if n.startswith(POLICY_ASSUMED)}
        out["families"] = {f: stats(rows) for f, rows in sorted(families.items())}
        if any(r.nodes is not None for r in self.cases):
            out["multi_node"] = stats(r for r in self.cases if (r.nodes or 0) > 1)
        mem = sorted(abs(e) for r in self.cases if (e := r.memory_error_pct) is not None)
        if mem:
            out["memory"] = {"n": len(mem), "median_abs_error_pct": _quantile(mem, 0.5),
                             "p90_abs_error_pct": _quantile(mem, 0.9),
                             "cases": {r.id: round(r.memory_error_pct or 0.0, 2) for r in self.cases
                                       if r.memory_error_pct is not None}}
        return out

    def to_dict(self) -> dict[str, Any]:
        """The JSON form printed by ``twin validate --json``."""
        key_p, key_m = (("predicted_step_time_s", "measured_step_time_s") if self.kind == "training"
                        else ("predicted_busbw_GBps", "measured_busbw_GBps"))
        cases = []
        for r in self.cases:
            row: dict[str, Any] = {"id": r.id, "family": r.family, key_p: r.predicted, key_m: r.measured,
                                   "error_pct": r.error_pct}
            if r.notes:
                row["notes"] = r.notes
            if r.plan:
                row["plan"] = r.plan
            if r.points:
                row["points"] = r.points
            if r.nodes is not None:
                row["nodes"] = r.nodes
            if r.memory_measured_gib is not None:
                row.update(predicted_memory_gib=r.memory_predicted_gib, measured_memory_gib=r.memory_measured_gib,
                           memory_error_pct=r.memory_error_pct)
            cases.append(row)
        return {"kind": self.kind, "cases": cases, "summary": self.summary()}


def _quantile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated quantile (numpy's default); NaN for no values."""
    if not sorted_values:
        return float("nan")
    if len(sorted_values) == 1:
        return sorted_values[0]
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)
