"""Reduce a batch of evaluated points to what the caller keeps; merge batches.

A batch result holds counts by infeasibility reason, the top N feasible points by the
objective, the throughput/power Pareto front, and (only when asked) every row. Merging
is order-independent and keyed by batch index, so a batch that is retried (a worker died)
or arrives twice counts once, and inline and Ray runs give identical results.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from twin.core.ops import Labels
from twin.core.results import Refusal
from twin.sweep.evaluator import Evaluated
from twin.sweep.metrics import INT_COLUMNS, as_python
from twin.sweep.sweep_points import PointBatch

Rows = dict[str, np.ndarray]
# Plan/cluster descriptors every row carries (read from the evaluated scenario).
DESCRIPTORS = ("model", "system", "num_gpus", "fabric", "tp", "pp", "vp", "cp", "ep", "mbs", "gbs", "recompute",
               "precision", "sharding")
# Axis paths that a descriptor column also shows (tables show the descriptor only).
SAME_AS_DESCRIPTOR = {
    "cluster.num_gpus": "num_gpus", "cluster.scale_out.fabric": "fabric", "cluster.system": "system",
    "plan.tp": "tp", "plan.pp": "pp", "plan.vp": "vp", "plan.cp": "cp", "plan.ep": "ep", "plan.mbs": "mbs",
    "plan.gbs": "gbs", "plan.recompute": "recompute", "plan.precision": "precision",
    "plan.optimizer_sharding": "sharding"}
PARETO = ("tokens_per_s", "power_kw")  # maximise throughput, minimise power




def _descriptors(batch: PointBatch, sel: np.ndarray) -> dict[str, np.ndarray]:
    """The descriptor columns of the selected points (None, or -1 for integers, where a point has no scenario)."""
    err = batch.error_ix[sel] >= 0

    def gather(table: list[Any], ix: np.ndarray) -> np.ndarray:
        arr = np.asarray([*table, None], dtype=object)
        return arr[np.where(err | (ix < 0), len(table), ix)]

    cix, mix = batch.cluster_ix[sel], batch.model_ix[sel]
    plan = batch.plan
    out: dict[str, np.ndarray] = {
        "model": gather([m.name or "?" for m in batch.models], mix),
        "system": gather([c.name or c.gpu.name for c in batch.clusters], cix),
        "num_gpus": np.where(err, -1, np.asarray([c.num_gpus for c in batch.clusters] or [0], np.int64)[
            np.maximum(cix, 0)]),
        "fabric": gather([c.scale_out.fabric if c.scale_out is not None else "none" for c in batch.clusters], cix),
    }
    for name in ("tp", "pp", "vp", "cp", "ep", "mbs", "gbs"):
        out[name] = np.where(err, -1, getattr(plan, name)[sel])
    for name in ("recompute", "precision"):
        out[name] = np.where(err, None, _names(getattr(plan, name)[sel]))
    sharding = _names(plan.optimizer_sharding[sel])
    noreshard = (plan.optimizer_sharding[sel] == "fsdp") & ~plan.fsdp_reshard_after_forward[sel].astype(bool)
    named = np.where(noreshard, "fsdp-noreshard", sharding)
    # hybrid sharding (plan.dp_shard > 0) over FSDP: the plan search's "hsdp"
    hybrid = (np.asarray(plan.dp_shard)[sel] > 0) & (plan.optimizer_sharding[sel] == "fsdp")
    out["sharding"] = np.where(err, None, np.where(hybrid, "hsdp", named))
    return out


def _names(column: np.ndarray) -> np.ndarray:
    """A plan string column as Python strings (object array)."""
    return (column.names() if isinstance(column, Labels) else np.asarray(column)).astype(object)


def build_rows(batch: PointBatch, ev: Evaluated, select: np.ndarray | None = None) -> Rows:
    """Columnar rows of (a selection of) the points of a batch."""
    sel = np.arange(len(batch)) if select is None else select
    rows: Rows = {"point_id": batch.ids[sel]}
    rows.update(batch.axis_columns(sel))
    descriptors = _descriptors(batch, sel)
    for name in DESCRIPTORS:
        rows[name] = descriptors[name]
    rix = ev.reason_ix[sel]
    reasons = np.asarray([*ev.reasons, ""], dtype=object)
    rows["feasible"] = rix < 0
    rows["reason"] = reasons[np.where(rix < 0, len(ev.reasons), rix)]
    for c, values in ev.floats.items():  # FLOAT_COLUMNS, and DETAIL_COLUMNS where rows are kept
        rows[c] = values[sel]
    for c in INT_COLUMNS:
        rows[c] = ev.ints[c][sel]
    return rows


def take(rows: Rows, idx: np.ndarray) -> Rows:
    """A selection of rows."""
    return {k: v[idx] for k, v in rows.items()}


def concat(parts: Iterable[Rows]) -> Rows:
    """Rows of several batches, one table (columns present in the first part)."""
    parts = [p for p in parts if p and len(next(iter(p.values()))) >= 0]
    if not parts:
        return {}
    keys = list(parts[0])
    out: Rows = {}
    for k in keys:
        arrays = [p[k] for p in parts if k in p]
        if any(a.dtype == object for a in arrays):
            arrays = [a.astype(object) for a in arrays]
        out[k] = np.concatenate(arrays) if arrays else np.asarray([])
    return out


def nrows(rows: Rows) -> int:
    """Row count of a columnar table."""
    return len(rows["point_id"]) if rows else 0


def top_rows(rows: Rows, metric: str, order: str, n: int) -> Rows:
    """The best ``n`` feasible rows by ``metric``; ties go to the plan that leaves more memory
    free (lower ``memory_gib``: at an equal step time a capacity planner takes the one with
    headroom), then to the lower point id.
    """
    if not rows or nrows(rows) == 0:
        return rows
    ok = np.flatnonzero(rows["feasible"] & np.isfinite(rows[metric]))
    if len(ok) == 0:
        return take(rows, ok)
    key = rows[metric][ok]
    if order == "max":
        key = -key
    if len(ok) > 4 * n:
        part = np.argpartition(key, n - 1)[:n]
        cut = key[part].max()
        cand = np.flatnonzero(key <= cut)  # every row tied at the cut-off competes on point id
        ok, key = ok[cand], key[cand]
    memory = rows["memory_gib"][ok] if "memory_gib" in rows and metric != "memory_gib" else np.zeros(len(ok))
    order_ix = np.lexsort((rows["point_id"][ok], memory, key))[:n]
    return take(rows, ok[order_ix])


def pareto_rows(rows: Rows) -> Rows:
    """Feasible rows no other row beats on both throughput (higher) and power (lower)."""
    if not rows or nrows(rows) == 0:
        return rows
    ok = np.flatnonzero(rows["feasible"] & np.isfinite(rows[PARETO[0]]))
    if len(ok) == 0:
        return take(rows, ok)
    tps, power, pid = rows[PARETO[0]][ok], rows[PARETO[1]][ok], rows["point_id"][ok]
    order = np.lexsort((pid, -tps, power))
    keep = []
    best = -math.inf
    for j in order:
        if tps[j] > best:
            keep.append(j)
            best = tps[j]
    return take(rows, ok[np.asarray(keep, dtype=np.int64)])


@dataclass
class BatchResult:
    """What one batch reduces to (small unless rows are kept)."""

    index: int
    start: int
    stop: int
    counts: dict[str, int]
    feasible: int
    top: Rows
    pareto: Rows
    rows: Rows | None = None
    stats: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    # The typed refusal of each reason counted (a row's ``reason`` is its message).
    refusals: dict[str, Refusal] = field(default_factory=dict)

    @property
    def points(self) -> int:
        """Points in this batch."""
        return self.stop - self.start


def reduce_batch(index: int, batch: PointBatch, ev: Evaluated, metric: str, order: str, top: int,
                 keep_rows: bool, seconds: float = 0.0) -> BatchResult:
    """Counts, top N, Pareto front (and rows) of one evaluated batch."""
    counts: dict[str, int] = {}
    if len(ev.reasons):
        bc = np.bincount(ev.reason_ix[ev.reason_ix >= 0], minlength=len(ev.reasons))
        counts = {r: int(c) for r, c in zip(ev.reasons, bc, strict=True) if c}
    feasible_ix = np.flatnonzero(ev.reason_ix < 0)
    if keep_rows:
        rows = build_rows(batch, ev)
        top_r, front = top_rows(rows, metric, order, top), pareto_rows(rows)
    else:
        rows = None
        feas = build_rows(batch, ev, _candidates(ev, feasible_ix, metric, order, top))
        top_r, front = top_rows(feas, metric, order, top), pareto_rows(feas)
    start = int(batch.ids[0]) if len(batch) else 0
    return BatchResult(index=index, start=start, stop=start + len(batch), counts=counts,
                       feasible=len(feasible_ix), top=top_r, pareto=front, rows=rows, stats=dict(ev.stats),
                       seconds=seconds, refusals={r: ev.refusals[r] for r in counts if r in ev.refusals})


def _candidates(ev: Evaluated, feasible: np.ndarray, metric: str, order: str, top: int) -> np.ndarray:
    """Feasible points that can be in the top N or on the Pareto front (rows built for these only)."""
    if len(feasible) <= 4 * top + 64:
        return feasible
    key = ev.floats[metric][feasible]
    key = -key if order == "max" else key
    part = np.argpartition(key, top - 1)[:top]
    cut = key[part].max()
    keep = key <= cut
    # Pareto candidates: every point whose throughput is at least that of every point with
    # less or equal power (ties kept; pareto_rows breaks them by point id). Sorted once:
    # the average power differs from point to point (it follows the step time).
    tps, power = ev.floats["tokens_per_s"][feasible], ev.floats["power_kw"][feasible]
    order = np.lexsort((-tps, power))
    best_before = np.concatenate(([-np.inf], np.maximum.accumulate(tps[order])[:-1]))
    keep[order[tps[order] >= best_before]] = True
    return feasible[keep]


@dataclass
class SweepResult:
    """The merged result of a sweep."""

    name: str
    total: int
    metric: str
    order: str
    top_n: int
    done: int = 0
    feasible: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    top: Rows = field(default_factory=dict)
    pareto: Rows = field(default_factory=dict)
    rows: Rows | None = None
    batches: set[int] = field(default_factory=set)
    seconds: float = 0.0
    cancelled: bool = False
    executor: str = "inline"
    workers: int = 1
    stats: dict[str, int] = field(default_factory=dict)
    retried: int = 0
    # The typed refusal of each reason counted (twin.core.results.Refusal), by message.
    refusals: dict[str, Refusal] = field(default_factory=dict)
    _row_parts: dict[int, Rows] = field(default_factory=dict, repr=False)

    def add(self, b: BatchResult) -> bool:
        """Merge one batch; a batch index seen before is ignored (False)."""
        if b.index in self.batches:
            return False
        self.batches.add(b.index)
        self.done += b.points
        self.feasible += b.feasible
        for k, v in b.counts.items():
            self.counts[k] = self.counts.get(k, 0) + v
        self.refusals.update(b.refusals)
        for k, v in b.stats.items():
            self.stats[k] = self.stats.get(k, 0) + v
        self.top = top_rows(concat([self.top, b.top]) if self.top else b.top, self.metric, self.order, self.top_n)
        self.pareto = pareto_rows(concat([self.pareto, b.pareto]) if self.pareto else b.pareto)
        if b.rows is not None:
            self._row_parts[b.index] = b.rows
        return True

    def finish(self) -> None:
        """Assemble kept rows in point order."""
        if self._row_parts:
            rows = concat(self._row_parts[i] for i in sorted(self._row_parts))
            order = np.argsort(rows["point_id"], kind="stable")
            self.rows = take(rows, order)
            self._row_parts = {}

    @property
    def infeasible(self) -> int:
        """Points counted by reason."""
        return sum(self.counts.values())

    def best(self) -> dict[str, Any] | None:
        """The best point as a plain mapping."""
        if not self.top or nrows(self.top) == 0:
            return None
        return row_dict(self.top, 0)

    def to_dict(self, rows: bool = False) -> dict[str, Any]:
        """JSON-ready summary (rows only when asked)."""
        out: dict[str, Any] = {
            "name": self.name, "total_points": self.total, "evaluated_points": self.done,
            "feasible_points": self.feasible, "infeasible_by_reason": dict(sorted(self.counts.items(),
                                                                                key=lambda kv: -kv[1])),
            "objective": {"metric": self.metric, "order": self.order, "top": self.top_n},
            "top": [row_dict(self.top, i) for i in range(nrows(self.top))],
            "pareto": [row_dict(self.pareto, i) for i in range(nrows(self.pareto))],
            "seconds": self.seconds, "points_per_s": self.done / self.seconds if self.seconds > 0 else None,
            "cancelled": self.cancelled, "executor": self.executor, "workers": self.workers,
            "retried_batches": self.retried, "stats": dict(self.stats),
        }
        if rows and self.rows is not None:
            out["rows"] = [row_dict(self.rows, i) for i in range(nrows(self.rows))]
        return out


def row_dict(rows: Mapping[str, np.ndarray], i: int) -> dict[str, Any]:
    """One row as a plain mapping (NaN as None)."""
    out: dict[str, Any] = {}
    for k, v in rows.items():
        x = as_python(v[i])
        if isinstance(x, float) and not math.isfinite(x):
            x = None
        out[k] = x
    return out
