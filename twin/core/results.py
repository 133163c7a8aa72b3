"""What an evaluation gives: columns per point, an :class:`Estimate` per row, a typed refusal.

One result for a batch and for one scenario: :class:`PointResults` holds, per point, the
estimate's numbers as columns (numpy arrays), or why the point has none (a :class:`Refusal`:
the field, the rule and the kind, never a string to parse back); :meth:`PointResults.estimate`
is the row view, the :class:`~twin.core.estimate.Estimate` of one point built from the batch's
own numbers. ``TwinModel.evaluate`` (one scenario) gives the same :class:`Estimate` with the
diagnostics only one scenario carries (notes, algorithms, details, the fabric report, link
loads), and :func:`estimate_columns` turns it back into the batch's columns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from twin.core import energy as energy_model
from twin.core import ops
from twin.core.errors import (
    _PARENS,
    InfeasibleError,
    NotFoundError,
    PluginError,
    SpecError,
    TooLargeError,
    TwinError,
    reason_of,
)
from twin.core.estimate import Breakdown, Cost, Energy, Estimate, StepInterval
from twin.core.memory import MemoryBreakdown
from twin.core.units import GIB

# The kinds of refusal, after the error each stands for.
INVALID, NOT_FOUND, INFEASIBLE, TOO_LARGE, PLUGIN, PRUNED, ERROR = (
    "invalid", "not_found", "infeasible", "too_large", "plugin", "pruned", "error")
_KIND_OF: tuple[tuple[type[Exception], str], ...] = (
    (SpecError, INVALID), (NotFoundError, NOT_FOUND), (InfeasibleError, INFEASIBLE), (TooLargeError, TOO_LARGE),
    (PluginError, PLUGIN))


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a point has no numbers: the ``field`` it names, the ``rule`` it breaks (numbers in
    parentheses dropped, so points failing the same rule count together), and the ``kind`` of
    error it stands for (``invalid``: a rule, ``not_found``: an unknown name, ``infeasible``:
    it does not fit, ``pruned``: a search dropped it, ...). ``message`` is the one-line text.
    """

    field: str
    rule: str
    kind: str = INVALID
    message: str = ""

    def __post_init__(self) -> None:
        if not self.message:
            object.__setattr__(self, "message", f"{self.field}: {self.rule}" if self.field else self.rule)

    @classmethod
    def of(cls, err: Exception) -> Refusal:
        """The refusal an error stands for (its message is ``errors.reason_of``'s)."""
        kind = next((k for t, k in _KIND_OF if isinstance(err, t)), ERROR)
        fld = str(getattr(err, "field", "") or "")
        if isinstance(err, SpecError | TooLargeError):
            rule = _PARENS.sub("", err.rule)
        elif isinstance(err, InfeasibleError):
            rule = _PARENS.sub("", err.reason)
        elif isinstance(err, NotFoundError):
            rule = f"unknown name {err.name!r}"
        else:
            rule = _PARENS.sub("", str(err)) if isinstance(err, TwinError) else f"{type(err).__name__}: {err}"
        return cls(fld, rule, kind, reason_of(err))

    def error(self) -> TwinError:
        """The domain error this refusal stands for (a service maps it to its status code)."""
        if self.kind == INFEASIBLE:
            return InfeasibleError(self.field, self.rule)
        if self.kind == TOO_LARGE:
            return TooLargeError(self.field, self.rule)
        return SpecError(self.field, self.rule)


MEMORY = Refusal("memory", "does not fit in HBM", INFEASIBLE)
MEMORY_REASON = MEMORY.message
# What is offloaded does not fit its tier (``MemoryBreakdown.tier_fits``), in TIERS' order after HBM.
MEMORY_HOST = Refusal("memory", "what is offloaded to host does not fit in host DRAM", INFEASIBLE)
MEMORY_POOL = Refusal("memory", "what is offloaded to cxl does not fit in the CXL pool", INFEASIBLE)
MEMORY_REFUSALS = (MEMORY, MEMORY_HOST, MEMORY_POOL)


def full_tier(mem: MemoryBreakdown, headroom: float | None) -> Any:
    """Per point, the index in ``MEMORY_REFUSALS`` of the first tier that does not hold what is
    kept there (HBM leaving ``headroom`` of it free, host DRAM, the CXL pool); -1 where all do.
    """
    hbm, host, pool = mem.tier_fits()
    if headroom:
        hbm = ops.logical_and(hbm, mem.total <= mem.capacity * (1.0 - headroom))
    return ops.where(ops.logical_not(hbm), 0, ops.where(ops.logical_not(host), 1,
                                                        ops.where(ops.logical_not(pool), 2, -1)))


# Fits in HBM, but not leaving the share of it a search or sweep asked to keep free (memory_headroom).
HEADROOM = Refusal("memory", "fits in HBM but leaves less than the memory headroom free", INFEASIBLE)
HEADROOM_REASON = HEADROOM.message
PRUNED = Refusal("", "pruned: its step without communication already exceeds the best plans' step time", PRUNED)
PRUNED_REASON = PRUNED.message
# A point whose numbers leave the computable range (the arithmetic error's name is appended).
ARITHMETIC_FIELD, ARITHMETIC_RULE = "scenario", "some value is outside the numeric range the model can compute"
ARITHMETIC_REASON = f"{ARITHMETIC_FIELD}: {ARITHMETIC_RULE}"


def arithmetic(what: str) -> Refusal:
    """The refusal of a point the model cannot compute (``what``: the arithmetic failure)."""
    return Refusal(ARITHMETIC_FIELD, f"{ARITHMETIC_RULE} ({what})", INVALID)


class Refusals:
    """Distinct refusals, coded (a point holds the code of its own)."""

    def __init__(self) -> None:
        self.items: list[Refusal] = []
        self.names: list[str] = []
        self._codes: dict[str, int] = {}

    def code(self, refusal: Refusal) -> int:
        """The code of ``refusal`` (by its message), added when new."""
        c = self._codes.get(refusal.message)
        if c is None:
            c = self._codes[refusal.message] = len(self.names)
            self.names.append(refusal.message)
            self.items.append(refusal)
        return c

    def code_error(self, err: Exception) -> int:
        """The code of the refusal ``err`` stands for."""
        return self.code(Refusal.of(err))


# The prediction interval's columns (``twin.core.intervals``), in StepInterval's order.
INTERVAL_COLUMNS = ("step_time_p80_low_s", "step_time_p80_high_s", "step_time_p95_low_s", "step_time_p95_high_s")
# The memory categories a batch keeps as columns (``memory_<name>_bytes``: bytes, so that a row is
# exact), in MemoryBreakdown's order.
MEMORY_PARTS = ("weights", "gradients", "optimizer", "activations", "logits", "runtime", "offloaded", "capacity",
                "pool_capacity", "offloaded_host", "host_capacity")
_HOST_PARTS = ("offloaded_host", "host_capacity")


@dataclass
class PointResults:
    """What a batch evaluation gives per point.

    ``reason_ix[i]`` is -1 for a feasible point, else an index into ``reasons`` (the message)
    and ``refusals`` (the typed :class:`Refusal`): the first rule it breaks, ``MEMORY``, or
    why it could not be evaluated. ``columns`` hold the estimate's numbers (NaN where
    infeasible): ``step_time_s``, ``compute_s``, ``recompute_s``, ``exposed_<dimension>_s``
    and ``issued_<dimension>_s`` for every dimension a strategy reported, ``bubble_s``,
    ``optimizer_s``, ``offload_s``, ``interference_s``, ``memory_gib`` and its parts
    (``memory_<part>_bytes``, :data:`MEMORY_PARTS`), ``tokens_per_s``, ``tokens_per_s_per_gpu``,
    ``model_tflops_per_gpu``, ``model_flops_per_step``, ``mfu``, ``mfu_at_precision_peak``, the
    step's energy (``twin.core.energy``: ``energy_j`` and ``energy_<component>_j`` for gpu,
    nic, switch, optics, host, cxl, facility, ``joules_per_token``, ``tokens_per_joule``,
    ``average_power_w``, ``gpu_busy_s``, ``gpu_wait_s``) and its cost (``cost_usd_per_step``,
    ``usd_per_million_tokens``; NaN where the point gives no prices), its prediction interval
    (:data:`INTERVAL_COLUMNS`, where the engine has an interval table); ``microbatches`` and
    ``dp`` are ints (-1 where infeasible); ``fits``: whether the point's memory fits (also for
    points evaluated with ``require_fit=False``). :meth:`estimate` is one row as an Estimate.
    """

    reason_ix: np.ndarray
    reasons: list[str]
    columns: dict[str, np.ndarray]
    microbatches: np.ndarray
    dp: np.ndarray
    stats: dict[str, int] = field(default_factory=dict)
    fits: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    refusals: list[Refusal] = field(default_factory=list)
    # Writes not yet made into full-length columns (``evaluate_points(sparse=True)``): per
    # column, its (rows, values) in the order written; None: every write is made at once.
    _pending: dict[str, list[tuple[Any, Any]]] | None = field(default=None, init=False, repr=False, compare=False)
    # values_at's positions of one write's rows among the rows read, per (write rows, rows
    # read) object pair: a batch writes every number at the same rows, and is read the same
    # way (each entry holds both, so an id is never another object's).
    _at: dict[tuple[int, int], tuple[Any, Any, Any, Any]] = field(default_factory=dict, init=False, repr=False,
                                                                  compare=False)
    _written: dict[tuple[int, ...], tuple[Any, np.ndarray]] = field(default_factory=dict, init=False, repr=False,
                                                                    compare=False)

    def __post_init__(self) -> None:
        if len(self.fits) != len(self.reason_ix):
            self.fits = np.zeros(len(self.reason_ix), bool)

    @classmethod
    def empty(cls, n: int, coded: Refusals, stats: dict[str, int]) -> PointResults:
        """``n`` feasible points with no numbers yet; reasons and refusals are ``coded``'s lists."""
        return cls(np.full(n, -1, np.int64), coded.names, {}, np.full(n, -1, np.int64), np.full(n, -1, np.int64),
                   stats, refusals=coded.items)

    def __len__(self) -> int:
        return len(self.reason_ix)

    @property
    def feasible(self) -> np.ndarray:
        """Bool per point: evaluated and fits in memory."""
        return self.reason_ix < 0

    def reason(self, i: int) -> str | None:
        """Why point ``i`` is infeasible (None if it is feasible)."""
        k = int(self.reason_ix[i])
        return None if k < 0 else self.reasons[k]

    def refusal(self, i: int) -> Refusal | None:
        """Point ``i``'s :class:`Refusal` (None if it is feasible)."""
        k = int(self.reason_ix[i])
        return None if k < 0 else self.refusals[k]

    def put(self, name: str, rows: Any, values: Any) -> None:
        """Write ``values`` into column ``name`` at ``rows`` (a new column starts as NaN)."""
        if self._pending is not None:
            self._pending.setdefault(name, []).append((rows, values))
            return
        col = self.columns.get(name)
        if col is None:
            col = self.columns[name] = np.full(len(self), np.nan)
        col[rows] = values

    def dense(self) -> None:
        """Make the pending writes (``sparse``) into full-length columns, as ``put`` would have."""
        pending, self._pending = self._pending, None
        for name, writes in (pending or {}).items():
            for rows, values in writes:
                self.put(name, rows, values)

    def names(self) -> list[str]:
        """The columns written so far (in ``columns`` or still pending)."""
        return [*self.columns, *(n for n in self._pending or () if n not in self.columns)]

    def written(self, name: str) -> np.ndarray:
        """The rows column ``name`` was written at (ascending): where its full-length column
        would hold something other than NaN's start.
        """
        pending = (self._pending or {}).get(name)
        if not pending:
            return np.flatnonzero(~np.isnan(self.columns[name]))
        key = tuple(id(where) for where, _ in pending)
        known = self._written.get(key)
        if known is not None and all(a is b for a, (b, _) in zip(known[0], pending, strict=True)):
            return known[1]  # type: ignore[no-any-return]
        rows = np.concatenate([np.atleast_1d(np.asarray(where, np.int64)) for where, _ in pending])
        if len(rows) > 1 and not (rows[1:] > rows[:-1]).all():  # (one write at ascending rows: as they are)
            rows = ops.unique_ints(rows, len(self))[0]
        self._written[key] = (tuple(where for where, _ in pending), rows)
        return rows

    def values_at(self, name: str, rows: np.ndarray) -> np.ndarray:
        """Column ``name`` at ``rows`` (NaN where never written), without making a
        full-length column of pending writes: a caller that reads a few points of many.
        """
        pending = (self._pending or {}).get(name)
        if not pending:
            return self.columns[name][rows]
        rows = np.asarray(rows)
        if len(rows) > 1 and not (rows[1:] > rows[:-1]).all():  # each distinct row once, ascending
            distinct, inverse = np.unique(rows, return_inverse=True)
            return self.values_at(name, distinct)[inverse.reshape(-1)]
        out = np.full(len(rows), np.nan)
        if not len(rows):
            return out
        for where, values in pending:  # in the order written: a later write wins, as in put
            at, hit = self._positions(where, rows)
            if hit is None:
                out[:] = values  # (the usual read of a batch's results: no positions to gather)
                continue
            if np.ndim(hit) == 0:
                if hit:
                    out[at] = values
                continue
            out[at] = values if np.ndim(values) == 0 else np.asarray(values)[hit]
        return out

    def _positions(self, where: Any, rows: np.ndarray) -> tuple[Any, Any]:
        """(positions in ``rows`` of the rows ``where`` wrote, which of them were read); (None,
        None) when written at exactly the rows read, in their order.
        """
        known = self._at.get((id(where), id(rows)))
        if known is not None and known[0] is where and known[1] is rows:
            return known[2], known[3]
        at = np.searchsorted(rows, where)
        inside = at < len(rows)
        hit = inside & (rows[np.where(inside, at, 0)] == where)
        if np.ndim(hit):
            at = at[hit]
            if len(at) == len(rows) and np.array_equal(where, rows):
                at = hit = None
        self._at[(id(where), id(rows))] = (where, rows, at, hit)
        return at, hit

    def value(self, name: str, i: int) -> float:
        """Column ``name`` of point ``i`` (NaN where never written)."""
        if name not in self.columns and name not in (self._pending or {}):
            return math.nan
        return float(self.values_at(name, np.asarray([i], np.int64))[0])

    def estimate(self, i: int, scenario: str = "") -> Estimate:
        """Point ``i`` as an :class:`Estimate`, from the batch's own numbers (the row view).

        Raises the refusal's error for an infeasible point. The diagnostics only one scenario
        carries (notes, algorithms, details, bytes, the fabric report and link loads) are empty.
        """
        refusal = self.refusal(i)
        if refusal is not None:
            raise refusal.error()
        return estimate_of_row({name: self.value(name, i) for name in self.names()}, int(self.microbatches[i]),
                               int(self.dp[i]), scenario)


def estimate_of_row(row: dict[str, float], microbatches: int, dp: int, scenario: str = "") -> Estimate:
    """An :class:`Estimate` from one row of a batch's columns (:class:`PointResults`; its memory
    verdict is the memory columns': ``Estimate.fits``).
    """
    exposed = {k[len("exposed_"):-2]: v for k, v in row.items()
               if k.startswith("exposed_") and k.endswith("_s") and not math.isnan(v)}
    issued = {k[len("issued_"):-2]: v for k, v in row.items()
              if k.startswith("issued_") and k.endswith("_s") and not math.isnan(v)}
    breakdown = Breakdown(compute_s=row["compute_s"], recompute_s=row["recompute_s"],
                          exposed_comm_s=exposed, bubble_s=row["bubble_s"], optimizer_s=row["optimizer_s"],
                          offload_s=row["offload_s"], overlap_interference_s=row["interference_s"])
    # Rows written before host DRAM was a tier of its own hold no host columns: nothing there.
    mem = MemoryBreakdown(*(row.get(f"memory_{p}_bytes", 0.0 if p in _HOST_PARTS else math.nan)
                            for p in MEMORY_PARTS))
    energy, cost = energy_model.from_columns(row)
    bounds = [row.get(name, math.nan) for name in INTERVAL_COLUMNS]
    interval = None if any(math.isnan(b) for b in bounds) else StepInterval(*bounds)
    return Estimate(scenario=scenario, step_time_s=row["step_time_s"], breakdown=breakdown, memory=mem,
                    tokens_per_s=row["tokens_per_s"], tokens_per_s_per_gpu=row["tokens_per_s_per_gpu"],
                    model_tflops_per_gpu=row["model_tflops_per_gpu"], mfu=row["mfu"],
                    mfu_at_precision_peak=row["mfu_at_precision_peak"],
                    model_flops_per_step=row.get("model_flops_per_step", math.nan), microbatches=microbatches, dp=dp,
                    comm_issued_s=issued, bytes_per_step={}, algorithms={}, details={}, fabric={}, notes=(),
                    links=(), contention_s=0.0, energy=energy, cost=cost, interval=interval)


def estimate_columns(est: Estimate) -> dict[str, float]:
    """The batch's columns (:class:`PointResults`) of one :class:`Estimate`."""
    bd = est.breakdown
    mem = est.memory
    return {"step_time_s": est.step_time_s, "compute_s": bd.compute_s, "recompute_s": bd.recompute_s,
            **{f"exposed_{k}_s": v for k, v in bd.exposed_comm_s.items()},
            **{f"issued_{k}_s": v for k, v in est.comm_issued_s.items()},
            "bubble_s": bd.bubble_s, "optimizer_s": bd.optimizer_s, "offload_s": bd.offload_s,
            "interference_s": bd.overlap_interference_s, "memory_gib": mem.total / GIB,
            **{f"memory_{p}_bytes": getattr(mem, p) for p in MEMORY_PARTS},
            "tokens_per_s": est.tokens_per_s, "tokens_per_s_per_gpu": est.tokens_per_s_per_gpu,
            "model_tflops_per_gpu": est.model_tflops_per_gpu, "model_flops_per_step": est.model_flops_per_step,
            "mfu": est.mfu, "mfu_at_precision_peak": est.mfu_at_precision_peak, **energy_values(est),
            **interval_values(est)}


def interval_values(est: Estimate) -> dict[str, float]:
    """The interval's columns (``INTERVAL_COLUMNS``) of one :class:`Estimate` (none without one)."""
    iv = est.interval
    if iv is None:
        return {}
    return dict(zip(INTERVAL_COLUMNS, (iv.p80_low_s, iv.p80_high_s, iv.p95_low_s, iv.p95_high_s), strict=True))


def energy_values(est: Estimate) -> dict[str, float]:
    """The energy and cost columns (``PointResults.columns``) of one :class:`Estimate`."""
    e, c = est.energy, est.cost
    if e is None:
        return {}
    return energy_model.columns_of(e, c)


def zero_missing_exposed(out: PointResults) -> None:
    """A feasible point shows 0 s for a dimension no strategy of its own exposed (NaN before)."""
    ok = out.reason_ix < 0
    for name, col in out.columns.items():
        if name.startswith(("exposed_", "issued_")):
            col[ok & np.isnan(col)] = 0.0


__all__ = ["ARITHMETIC_REASON", "HEADROOM", "HEADROOM_REASON", "INFEASIBLE", "INVALID", "MEMORY", "MEMORY_HOST",
           "MEMORY_PARTS", "MEMORY_POOL", "MEMORY_REASON", "MEMORY_REFUSALS", "PRUNED", "PRUNED_REASON", "Cost",
           "Energy", "PointResults", "Refusal", "Refusals", "arithmetic", "energy_values", "estimate_columns",
           "estimate_of_row", "full_tier", "zero_missing_exposed"]
