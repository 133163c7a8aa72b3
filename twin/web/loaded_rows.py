"""A loaded rows file (``twin sweep --out``) kept as its columns, not as a dict per row.

A row as a dict costs ~4.7 KB with the 91 columns a sweep writes (11,520 rows of
``examples/sweeps/fabrics-and-plans.yaml``), so a 79 KB zstd Parquet file of 10^7 rows grew
the service by 2.1 GiB (issue 39). Kept as numpy columns (strings interned) a row costs its
values; the page's table and plots are computed from the columns, and only the rows a table
shows become dicts. :meth:`LoadedRows.table` and :meth:`LoadedRows.plots` answer exactly what
:meth:`twin.web.sweep_pages.SweepJob.table` and :func:`twin.web.views.plots` answer for the
same rows as dicts (:func:`twin.web.views.rows_from_columns`); tests compare them.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from twin.sweep.reduce import PARETO
from twin.web.views import STEP_PARTS, clean, pareto_group, pareto_label


def _sort_key(v: Any) -> tuple[int, Any]:
    return (0, v) if isinstance(v, int | float) else (1, str(v))


def _number(v: Any) -> bool:
    return isinstance(v, int | float)


class LoadedRows:
    """The columns of a rows file and the paths of its axes (columns named ``plan.*``, ...)."""

    def __init__(self, columns: Mapping[str, np.ndarray], axes: Sequence[str]) -> None:
        interned: dict[Any, Any] = {}
        self.columns: dict[str, np.ndarray] = {}
        for name, given in columns.items():
            col = given
            if col.dtype == object:  # the same text in many rows: one object
                col = np.asarray([interned.setdefault(v, v) if isinstance(v, str) else v for v in col.tolist()],
                                 dtype=object)
            self.columns[name] = col
        self.axes = tuple(a for a in axes if a in self.columns)
        self.others = tuple(c for c in self.columns if c not in self.axes)
        self._n = len(next(iter(self.columns.values()))) if self.columns else 0
        self.nbytes = sum(c.nbytes for c in self.columns.values()) + sum(sys.getsizeof(v) for v in interned)

    def __len__(self) -> int:
        return self._n

    def values(self, key: str) -> list[Any]:
        """Column ``key`` as a dict row has it (``axis:<path>`` for an axis): JSON-ready values, None
        for NaN and for a column the file does not have.
        """
        name = key[5:] if key.startswith("axis:") else key
        if (key.startswith("axis:") and name not in self.axes) or (not key.startswith("axis:") and
                                                                   key not in self.others):
            return [None] * self._n
        col = self.columns[name]
        if col.dtype.kind == "f":
            return [None if math.isnan(v) else v for v in col.tolist()]
        if col.dtype == object:
            return [clean(v) for v in col.tolist()]
        return col.tolist()

    def _ids(self) -> list[Any]:
        """``point_id`` as ``r.get("point_id", 0)`` reads it."""
        return self.values("point_id") if "point_id" in self.others else [0] * self._n

    def row(self, i: int) -> dict[str, Any]:
        """Row ``i`` as :func:`twin.web.views.rows_from_columns` makes it."""
        r: dict[str, Any] = {f"axis:{a}": self.columns[a][i] for a in self.axes}
        r.update({c: self.columns[c][i] for c in self.others})
        return clean(r)

    def failed(self) -> int:
        """Rows that are not feasible."""
        return sum(1 for f in self.values("feasible") if not f)

    def table(self, sort: str, order: str, limit: int) -> tuple[int, list[dict[str, Any]]]:
        """(rows, the first ``limit`` rows) in :meth:`SweepJob.table`'s order: feasible rows with a
        ``sort`` value by it, the others by ``point_id``.
        """
        feasible, key, ids = self.values("feasible"), self.values(sort), self._ids()
        ranked = [i for i in range(self._n) if feasible[i] and key[i] is not None]
        ranked.sort(key=lambda i: _sort_key(key[i]), reverse=order == "desc")
        chosen = set(ranked)
        rest = sorted((i for i in range(self._n) if i not in chosen), key=lambda i: _sort_key(ids[i]))
        return self._n, [self.row(i) for i in (ranked + rest)[:limit]]

    def plots(self, metric: str = "step_time_s") -> dict[str, Any]:
        """What :func:`twin.web.views.plots` draws for these rows, from the columns."""
        feasible, y, x = self.values("feasible"), self.values(PARETO[0]), self.values(PARETO[1])
        ids = self._ids()
        ok = [i for i in range(self._n) if feasible[i] and _number(y[i])]
        pts = sorted((i for i in ok if _number(x[i])), key=lambda i: (x[i], -y[i], ids[i]))
        front, best = [], -math.inf
        for i in pts:
            if y[i] > best:
                front.append(ids[i])
                best = y[i]
        values = self.values(metric)
        ranked = sorted((i for i in ok if _number(values[i])), key=lambda i: values[i],
                        reverse=metric in ("tokens_per_s", "mfu"))[:10]
        gpus = self.values("num_gpus")
        x_key: str | None = "num_gpus" if len({gpus[i] for i in ok}) > 1 else None
        if x_key is None and ok:
            x_key = next((f"axis:{a}" for a in self.axes if _number(v := self.values(f"axis:{a}")[ok[0]])
                          and not isinstance(v, bool)), None)
        scaling: dict[Any, float] = {}
        if x_key is not None:
            xs = self.values(x_key)
            for i in ok:
                if _number(xs[i]):
                    scaling[xs[i]] = max(scaling.get(xs[i], -math.inf), y[i])
        parts = {k: self.values(k) for k, _ in STEP_PARTS}
        axes = {f"axis:{a}": self.values(f"axis:{a}") for a in self.axes}
        group = pareto_group([{k: v[i] for k, v in axes.items()} for i in pts])
        return clean({
            "pareto": {"x": PARETO[1], "y": PARETO[0], "group": group,
                       "points": [[x[i], y[i], ids[i], pareto_label(axes[group][i]) if group else ""] for i in pts],
                       "front": front},
            "breakdown": {"parts": [{"key": k, "label": label} for k, label in STEP_PARTS],
                          "points": [{"point_id": ids[i], **{k: _part(parts[k][i], k in self.others)
                                                             for k, _ in STEP_PARTS}} for i in ranked]},
            "scaling": {"x": x_key, "y": PARETO[0], "points": sorted([k, v] for k, v in scaling.items())},
        })


def _part(value: Any, present: bool) -> Any:
    """A step part as ``r.get(k, 0.0)`` reads it: 0.0 where the file has no such column."""
    return value if present else 0.0
