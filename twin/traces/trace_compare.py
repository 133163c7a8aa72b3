"""Where a measured step differs from the twin's, class by class, and the calibration it supports.

Per step, on the rank the estimate's compute is of (``StepAnatomy.bottleneck``):

=================== ================================================ ============================
class               measured (a trace's classes, ``kineto``)         the twin
=================== ================================================ ============================
attention           attention kernels / ops                          the attention cores' passes
other compute       gemm + elementwise + memory + framework          compute + recompute - attention
optimizer           optimizer kernels / ops                          optimizer_s
communication       NCCL kernels / c10d calls (issued time)          comm_issued_s, all dimensions
step                the mean profiler step                           step_time_s
=================== ================================================ ============================

The calibration (``twin.core.specs.Calibration``'s fields, bounded as it bounds them):
``compute_efficiency`` scales the achieved compute, so the factor that makes the twin's compute
the measured one is the scenario's own times twin / measured; the communication factors are
fitted the same way on the fabric the measured dimensions' groups run over (a group inside one
scale-up domain: ``scale_up_bandwidth``; else ``scale_out_bandwidth``). A factor is left out, and
a note says why, where the trace cannot identify it: no such events, or a CPU trace's
communication calls, whose duration is the host's call, not the transfer (gloo and NCCL run the
collective on their own threads and streams).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from twin.core.step_anatomy import StepAnatomy
from twin.traces.kineto import COMM_CLASS, MeasuredStep

OTHER_COMPUTE = ("gemm", "elementwise", "memory", "framework")
# Calibration's bounds (twin.core.training_specs.Calibration: spec_field(ge=0.05, le=2)).
FACTOR_BOUNDS = (0.05, 2.0)


@dataclass(frozen=True, slots=True)
class Row:
    """One class: measured and twin seconds per step, and their ratio (measured / twin)."""

    name: str
    measured_s: float
    twin_s: float

    @property
    def ratio(self) -> float | None:
        return self.measured_s / self.twin_s if self.twin_s > 0 else None


@dataclass
class Comparison:
    """A measured step against the twin's (module docstring)."""

    source: str
    scenario: str
    rows: list[Row]
    comm: dict[str, dict[str, float]]
    calibration: dict[str, Any]
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "scenario": self.scenario,
                "classes": [{"class": r.name, "measured_s": r.measured_s, "twin_s": r.twin_s, "ratio": r.ratio}
                            for r in self.rows],
                "communication": self.comm, "calibration": self.calibration, "notes": list(self.notes)}


def _clamp(x: float) -> float:
    lo, hi = FACTOR_BOUNDS
    return min(hi, max(lo, x))


def compare(measured: MeasuredStep, anatomy: StepAnatomy, current: dict[str, float],
            scale_up_gpus: int) -> Comparison:
    """``measured`` against the twin's step of ``anatomy``; ``current``: the scenario's calibration
    factors; ``scale_up_gpus``: GPUs per scale-up domain (which fabric a group's traffic uses).
    """
    est = anatomy.estimate
    b = anatomy.bottleneck
    m = anatomy.microbatches
    attention_twin = m * b.attention_s
    compute_twin = est["compute_s"] + est["recompute_s"]
    cls = {k: v.total_s for k, v in measured.classes.items()}
    attention = cls.get("attention", 0.0)
    other = sum(cls.get(k, 0.0) for k in OTHER_COMPUTE)
    comm_twin = sum(est["comm_issued_s"].values())
    rows = [Row("attention", attention, attention_twin),
            Row("other compute", other, compute_twin - attention_twin),
            Row("optimizer", cls.get("optimizer", 0.0), est["optimizer_s"]),
            Row(COMM_CLASS, cls.get(COMM_CLASS, 0.0), comm_twin),
            Row("step", measured.step_s, est["step_time_s"])]
    comm = {key: {"calls": float(span.count), "measured_s": span.total_s,
                  "bytes": measured.comm_bytes.get(key, 0.0)} for key, span in measured.comm.items()}
    for dim, secs in est["comm_issued_s"].items():
        comm[f"twin:{dim}"] = {"twin_s": secs, "bytes": est["bytes_per_step"].get(dim, 0.0)}
    notes = list(measured.notes)
    calibration: dict[str, Any] = {}
    measured_compute = attention + other
    if measured_compute > 0 and compute_twin > 0:
        calibration["compute_efficiency"] = _clamp(current.get("compute_efficiency", 1.0)
                                                   * compute_twin / measured_compute)
    else:
        notes.append("compute_efficiency: no compute measured or predicted")
    _bandwidth(measured, anatomy, current, scale_up_gpus, comm_twin, calibration, notes)
    if calibration:
        calibration["source"] = f"twin import trace {measured.source} (twin / measured per class)"
    return Comparison(measured.source, anatomy.scenario, rows, comm, calibration, notes)


def _bandwidth(measured: MeasuredStep, anatomy: StepAnatomy, current: dict[str, float], scale_up_gpus: int,
               comm_twin: float, calibration: dict[str, Any], notes: list[str]) -> None:
    """The bandwidth factor of the fabric the twin's communicating dimensions use (module docstring)."""
    got = measured.classes.get(COMM_CLASS)
    if got is None or got.total_s <= 0 or comm_twin <= 0:
        notes.append("bandwidth: no communication measured or predicted; no bandwidth factor")
        return
    if measured.kind == "kineto-cpu":
        notes.append("bandwidth: a CPU trace's c10d calls time the host's call, not the transfer; "
                     "no bandwidth factor (profile a GPU run: its NCCL kernels time the transfer)")
        return
    dims = [d for d, s in anatomy.estimate["comm_issued_s"].items() if s > 0 and d in anatomy.groups]
    inside = all((anatomy.groups[d][0] - 1) * anatomy.groups[d][1] < scale_up_gpus for d in dims)
    name = "scale_up_bandwidth" if inside else "scale_out_bandwidth"
    calibration[name] = _clamp(current.get(name, 1.0) * comm_twin / got.total_s)
