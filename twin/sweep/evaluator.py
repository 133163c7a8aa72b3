"""A sweep batch through the step model's batch path, as the sweep's metric columns.

The points of a :class:`~twin.sweep.sweep_points.PointBatch` are split by model and strategy
selection (the structure a batch of the step model shares) and evaluated with ``TwinModel.evaluate_points``
(``twin.core.run``): the same functions :meth:`TwinModel.evaluate` runs for one
scenario, over numpy arrays. Nothing of the model is restated here; this module only maps
the batch's groups to point sets and the results to the sweep's columns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from twin.core import ops
from twin.core.errors import SpecError
from twin.core.estimate import Estimate
from twin.core.point_set import model_structure
from twin.core.results import INTERVAL_COLUMNS, MEMORY_PARTS, Refusal, energy_values, estimate_of_row, interval_values
from twin.core.units import GIB
from twin.engine import Engine, Pruner
from twin.sweep.metrics import DETAIL_COLUMNS, EXPOSED_DIMS, FLOAT_COLUMNS, INT_COLUMNS
from twin.sweep.sweep_points import PointBatch

if TYPE_CHECKING:
    from twin.core.specs import Model


def sweep_columns(est: Estimate) -> dict[str, float]:
    """The sweep's float columns (``FLOAT_COLUMNS``' model part) of one :class:`Estimate`."""
    bd = est.breakdown
    ex = bd.exposed_comm_s
    other = 0.0
    for k, v in ex.items():
        if k not in EXPOSED_DIMS:
            other += v
    return {
        "step_time_s": est.step_time_s, "compute_s": bd.compute_s, "recompute_s": bd.recompute_s,
        "exposed_tp_s": ex.get("tp", 0.0), "exposed_cp_s": ex.get("cp", 0.0), "exposed_ep_s": ex.get("ep", 0.0),
        "exposed_dp_s": ex.get("dp", 0.0), "exposed_pp_s": ex.get("pp", 0.0), "exposed_other_s": other,
        "bubble_s": bd.bubble_s, "optimizer_s": bd.optimizer_s, "offload_s": bd.offload_s,
        "interference_s": bd.overlap_interference_s, "memory_gib": est.memory.total / GIB,
        "tokens_per_s": est.tokens_per_s, "tokens_per_s_per_gpu": est.tokens_per_s_per_gpu,
        "model_tflops_per_gpu": est.model_tflops_per_gpu, "mfu": est.mfu,
        "mfu_at_precision_peak": est.mfu_at_precision_peak, **_energy_columns(energy_values(est)),
        **dict.fromkeys(INTERVAL_COLUMNS, math.nan), **interval_values(est),
    }


def _energy_columns(columns: Any) -> dict[str, Any]:
    """The sweep's energy columns from the step model's (``PointResults.columns`` names)."""
    out = {name: columns[name] for name in _ENERGY_FLOATS}
    out["power_kw"] = columns["average_power_w"] / 1e3
    return out


@dataclass
class Evaluated:
    """Per-point results of one batch: reason index (-1 = feasible) and metric columns.

    ``refusals``: the typed refusal of each message in ``reasons``
    (:class:`~twin.core.results.Refusal`: field, rule, kind; never parsed back from the text).
    ``floats`` holds :data:`~twin.sweep.metrics.FLOAT_COLUMNS`, and
    :data:`~twin.sweep.metrics.DETAIL_COLUMNS` too where rows are kept (``details``).
    """

    reason_ix: np.ndarray
    reasons: list[str]
    floats: dict[str, np.ndarray]
    ints: dict[str, np.ndarray]
    stats: dict[str, int] = field(default_factory=dict)
    refusals: dict[str, Refusal] = field(default_factory=dict)

    @classmethod
    def empty(cls, n: int, details: bool = False) -> Evaluated:
        """All points feasible with NaN metrics (filled by the evaluator)."""
        columns = FLOAT_COLUMNS + (DETAIL_COLUMNS if details else ())
        return cls(reason_ix=np.full(n, -1, dtype=np.int32), reasons=[],
                   floats={c: np.full(n, np.nan) for c in columns},
                   ints={c: np.full(n, -1, dtype=np.int64) for c in INT_COLUMNS},
                   stats={"evaluated": 0, "scalar_points": 0, "groups": 0, "batches": 0})


_MODEL_FLOATS = ("step_time_s", "compute_s", "recompute_s", "bubble_s", "optimizer_s", "offload_s",
                 "interference_s", "memory_gib", "tokens_per_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu",
                 "mfu", "mfu_at_precision_peak")
# The step model's energy and cost columns the sweep keeps under their own names.
_ENERGY_FLOATS = ("energy_j", "energy_gpu_j", "energy_nic_j", "energy_switch_j", "energy_optics_j", "energy_host_j",
                  "energy_cxl_j", "energy_facility_j", "joules_per_token", "tokens_per_joule", "cost_usd_per_step",
                  "usd_per_million_tokens")


class SweepEvaluator:
    """Evaluates :class:`PointBatch` es with the engine's step model (its batch path)."""

    def __init__(self, engine: Engine, *, memory_headroom: float = 0.0, prune_top: int = 0,
                 details: bool = False) -> None:
        """``details``: also fill :data:`~twin.sweep.metrics.DETAIL_COLUMNS` (where rows are kept).
        ``prune_top`` > 0: only the ``prune_top`` fastest feasible points matter (a plan
        search by step time); points that provably cannot be among them are not costed in
        full and get ``PRUNED_REASON`` (``twin.core.run.pruning.Pruner``; the bar carries over
        from batch to batch).
        """
        if not 0.0 <= memory_headroom < 1.0:
            raise SpecError("memory_headroom", f"must be in [0, 1) (got {memory_headroom!r})")
        self.engine = engine
        # Fraction of HBM a plan must leave free to count as fitting (0: the model's own verdict).
        self.headroom = memory_headroom
        self.pruner = Pruner(prune_top) if prune_top > 0 else None
        self.details = details

    def evaluate(self, batch: PointBatch) -> Evaluated:
        """Results of every point of ``batch``."""
        n = len(batch)
        out = Evaluated.empty(n, self.details)
        if n == 0:
            return out
        codes: dict[str, int] = {}

        def code(refusal: Refusal) -> int:
            c = codes.get(refusal.message)
            if c is None:
                c = codes[refusal.message] = len(codes)
                out.refusals[refusal.message] = refusal
            return c

        errs = np.asarray([code(batch.refusals.get(e) or Refusal("", e)) for e in batch.errors] + [-1], np.int64)
        out.reason_ix[:] = errs[batch.error_ix]
        # One point set per (model structure, strategy selection): the structure a batch of the
        # step model shares (models that differ in seq_len only are one: points.model_structure).
        strategies_ix = batch.strategy_index()
        structures: dict[Model, list[int]] = {}
        for j, m in enumerate(batch.models):
            structures.setdefault(model_structure(m), []).append(j)
        for models in structures.values():
            of_structure = ops.isin(batch.model_ix, models)
            for k in range(len(batch.strategies)):
                idx = np.flatnonzero(of_structure & (strategies_ix == k) & (batch.error_ix < 0))
                if len(idx):
                    self._evaluate_model(batch, idx, out, code)
        out.reasons = list(codes)
        return out

    def _evaluate_model(self, batch: PointBatch, idx: np.ndarray, out: Evaluated, code: Any) -> None:
        ps = batch.point_set(idx)
        out.stats["batches"] += 1  # point sets, each one structure
        # Sparse: a batch's feasible points are a fraction of it; their numbers are read as they are.
        res = self.engine.evaluate_points(ps, memory_headroom=self.headroom, prune=self.pruner, sparse=True)
        for key in ("evaluated", "scalar_points", "groups", "pruned"):
            out.stats[key] = out.stats.get(key, 0) + res.stats.get(key, 0)
        rcode = np.asarray([code(r) for r in res.refusals] + [-1], np.int64)
        out.reason_ix[idx] = rcode[res.reason_ix]
        ok = res.reason_ix < 0
        pts = idx[ok]
        if not len(pts):
            return
        rows = np.flatnonzero(ok)
        if len(idx) == len(out.reason_ix):  # every point of the batch: its columns as they are
            for name in _MODEL_FLOATS:  # (a point evaluated, then found infeasible, keeps its numbers)
                written = res.written(name)
                out.floats[name][written] = res.values_at(name, written)
        else:
            for name in _MODEL_FLOATS:
                out.floats[name][pts] = res.values_at(name, rows)
        other = np.zeros(len(rows))
        names = res.names()
        for key in names:
            if key.startswith("exposed_") and key.endswith("_s"):
                dim = key[len("exposed_"):-2]
                vals = np.nan_to_num(res.values_at(key, rows), nan=0.0)
                if dim in EXPOSED_DIMS:
                    out.floats[key][pts] = vals
                else:
                    other = other + vals
        for dim in EXPOSED_DIMS:
            if f"exposed_{dim}_s" not in names:
                out.floats[f"exposed_{dim}_s"][pts] = 0.0
        out.floats["exposed_other_s"][pts] = other
        for name in INTERVAL_COLUMNS:  # the prediction interval's bounds, where the engine has a table
            if name in names:
                out.floats[name][pts] = res.values_at(name, rows)
        read = {name: res.values_at(name, rows) for name in (*_ENERGY_FLOATS, "average_power_w")}
        for name, values in _energy_columns(read).items():
            out.floats[name][pts] = values
        out.ints["microbatches"][pts] = res.microbatches[ok]
        out.ints["dp"][pts] = res.dp[ok]
        if self.details:
            _fill_details(res, rows, pts, out)


def _fill_details(res: Any, rows: np.ndarray, pts: np.ndarray, out: Evaluated) -> None:
    """The detail columns (``DETAIL_COLUMNS``) of the feasible points ``pts`` (rows ``rows`` of ``res``)."""
    names = res.names()
    other = np.zeros(len(rows))
    for key in names:
        if key.startswith("issued_") and key.endswith("_s"):
            vals = np.nan_to_num(res.values_at(key, rows), nan=0.0)
            if key[len("issued_"):-2] in EXPOSED_DIMS:
                out.floats[key][pts] = vals
            else:
                other = other + vals
    for dim in EXPOSED_DIMS:
        if f"issued_{dim}_s" not in names:
            out.floats[f"issued_{dim}_s"][pts] = 0.0
    out.floats["issued_other_s"][pts] = other
    for name in (*(f"memory_{p}_bytes" for p in MEMORY_PARTS), "model_flops_per_step", "average_power_w", "gpu_busy_s",
                 "gpu_wait_s", "pue", "hardware_usd", "electricity_usd"):
        out.floats[name][pts] = res.values_at(name, rows)


def row_estimate(rows: Any, i: int) -> Estimate:
    """Row ``i`` of a sweep's kept rows (with :data:`~twin.sweep.metrics.DETAIL_COLUMNS`) as an
    :class:`Estimate`, from the batch's own numbers (``twin.core.results.estimate_of_row``).
    Dimensions without a column of their own are reported together as ``other``.
    """
    row = {name: float(rows[name][i]) for name in (*FLOAT_COLUMNS, *DETAIL_COLUMNS) if name in rows}
    return estimate_of_row(row, int(rows["microbatches"][i]), int(rows["dp"][i]))
