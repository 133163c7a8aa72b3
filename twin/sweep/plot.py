"""PNG charts of predictions and sweeps (matplotlib, an optional dependency).

- ``breakdown``: stacked step-time bars (compute, recompute, exposed communication per
  dimension, bubble, optimizer, offload, interference) for a prediction or the best points;
- ``scaling``: throughput vs GPU count, the best point per size, one line per model/fabric;
- ``pareto``: throughput vs power of every feasible point, the Pareto front highlighted.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from twin.core.errors import SpecError, TwinError
from twin.sweep.reduce import PARETO, Rows, nrows, pareto_rows

KINDS = ("auto", "breakdown", "scaling", "pareto")
PARTS = (("compute_s", "compute"), ("recompute_s", "recompute"), ("exposed_tp_s", "exposed tp"),
         ("exposed_cp_s", "exposed cp"), ("exposed_ep_s", "exposed ep"), ("exposed_dp_s", "exposed dp"),
         ("exposed_pp_s", "exposed pp"), ("exposed_other_s", "exposed other"), ("bubble_s", "pipeline bubble"),
         ("optimizer_s", "optimizer"), ("offload_s", "offload"), ("interference_s", "overlap interference"))


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise TwinError("plots need matplotlib: pip install 'fabric-twin[plot]'") from err
    return plt


def estimate_rows(estimates: Sequence[Mapping[str, Any]], labels: Sequence[str]) -> Rows:
    """Rows (breakdown columns) from ``Estimate.to_dict()`` mappings."""
    cols: dict[str, list[Any]] = {"label": list(labels), "step_time_s": []}
    for key, _ in PARTS:
        cols[key] = []
    for est in estimates:
        bd = est["breakdown"]
        ex = bd.get("exposed_comm_s", {})
        cols["step_time_s"].append(est["step_time_s"])
        cols["compute_s"].append(bd["compute_s"])
        cols["recompute_s"].append(bd["recompute_s"])
        for dim in ("tp", "cp", "ep", "dp", "pp"):
            cols[f"exposed_{dim}_s"].append(ex.get(dim, 0.0))
        cols["exposed_other_s"].append(sum(v for k, v in ex.items() if k not in ("tp", "cp", "ep", "dp", "pp")))
        cols["bubble_s"].append(bd["bubble_s"])
        cols["optimizer_s"].append(bd["optimizer_s"])
        cols["offload_s"].append(bd["offload_s"])
        cols["interference_s"].append(bd.get("overlap_interference_s", 0.0))
    return {k: np.asarray(v, dtype=object if k == "label" else np.float64) for k, v in cols.items()}


def _label(rows: Rows, i: int) -> str:
    if "label" in rows:
        return str(rows["label"][i])
    bits = []
    for k in ("tp", "pp", "vp", "cp", "ep", "mbs"):
        if k in rows:
            bits.append(f"{k}{_num(rows[k][i])}")
    if "num_gpus" in rows:
        bits.insert(0, f"{_num(rows['num_gpus'][i])}g")
    return " ".join(bits) or str(i + 1)


def _num(v: Any) -> str:
    return str(int(v)) if isinstance(v, float | np.floating) and float(v).is_integer() else str(v)


def plot_breakdown(rows: Rows, out: Path, title: str = "Step time breakdown") -> Path:
    """Stacked step-time bars, one per row."""
    plt = _pyplot()
    n = nrows(rows) if "point_id" in rows else len(rows["step_time_s"])
    if n == 0:
        raise SpecError("input", "has no feasible point to plot")
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * n + 3), 5))
    bottom = np.zeros(n)
    for key, name in PARTS:
        if key not in rows:
            continue
        vals = np.nan_to_num(np.asarray(rows[key], dtype=np.float64))
        if not vals.any():
            continue
        ax.bar(range(n), vals, bottom=bottom, label=name)
        bottom += vals
    ax.set_xticks(range(n), [_label(rows, i) for i in range(n)], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("seconds per step")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def _series_column(rows: Rows) -> str | None:
    for col in ("model", "fabric", "system"):
        if col in rows and len({str(v) for v in rows[col]}) > 1:
            return col
    return None


def plot_scaling(rows: Rows, out: Path, metric: str = "tokens_per_s") -> Path:
    """Best ``metric`` per GPU count (feasible points), one line per series."""
    plt = _pyplot()
    if "num_gpus" not in rows or metric not in rows:
        raise SpecError("input", f"needs num_gpus and {metric} columns for a scaling plot")
    ok = np.asarray(rows.get("feasible", np.ones(nrows(rows), bool)), dtype=bool) & np.isfinite(
        np.asarray(rows[metric], dtype=np.float64))
    if not ok.any():
        raise SpecError("input", "has no feasible point to plot")
    series = _series_column(rows)
    keys = sorted({str(v) for v in rows[series][ok]}) if series else ["all"]
    fig, ax = plt.subplots(figsize=(7, 5))
    for key in keys:
        sel = ok & (np.asarray([str(v) for v in rows[series]]) == key) if series else ok
        gpus = np.asarray(rows["num_gpus"], dtype=np.int64)[sel]
        vals = np.asarray(rows[metric], dtype=np.float64)[sel]
        xs = sorted(set(gpus.tolist()))
        ys = [vals[gpus == x].max() for x in xs]
        ax.plot(xs, ys, marker="o", label=key)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("GPUs")
    ax.set_ylabel(metric.replace("_", " ") + " (best plan)")
    ax.set_title(f"{metric} vs GPUs")
    ax.grid(True, which="both", alpha=0.3)
    if series:
        ax.legend(title=series, fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def plot_pareto(rows: Rows, out: Path, front: Rows | None = None) -> Path:
    """Throughput vs power of feasible points; the Pareto front (max throughput, min power) as a line."""
    plt = _pyplot()
    y_col, x_col = PARETO
    for c in PARETO:
        if c not in rows:
            raise SpecError("input", f"needs a {c} column for a Pareto plot")
    feasible = np.asarray(rows.get("feasible", np.ones(nrows(rows), bool)), dtype=bool)
    x = np.asarray(rows[x_col], dtype=np.float64)
    y = np.asarray(rows[y_col], dtype=np.float64)
    ok = feasible & np.isfinite(x) & np.isfinite(y)
    if not ok.any():
        raise SpecError("input", "has no feasible point to plot")
    front = front if front is not None and nrows(front) else pareto_rows(rows)
    fig, ax = plt.subplots(figsize=(7, 5))
    ax.scatter(x[ok], y[ok], s=6, alpha=0.3, label="feasible points")
    fx = np.asarray(front[x_col], dtype=np.float64)
    fy = np.asarray(front[y_col], dtype=np.float64)
    order = np.argsort(fx)
    ax.plot(fx[order], fy[order], color="C3", marker="o", label="Pareto front")
    ax.set_xlabel("average power over the step (kW): every component with a power figure, PUE included")
    ax.set_ylabel("throughput (tokens/s)")
    ax.set_title("Throughput vs power")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def _summary_rows(records: Sequence[Mapping[str, Any]]) -> Rows:
    keys: list[str] = []
    for r in records:
        for k in r:
            if k not in keys and k != "estimate":
                keys.append(k)
    out: Rows = {}
    for k in keys:
        vals = [r.get(k) for r in records]
        if all((isinstance(v, int | float) and not isinstance(v, bool)) or v is None for v in vals):
            out[k] = np.asarray([math.nan if v is None else v for v in vals], dtype=np.float64)
        elif all(isinstance(v, bool) for v in vals):
            out[k] = np.asarray(vals, dtype=bool)
        else:
            out[k] = np.asarray(vals, dtype=object)
    if "num_gpus" in out:
        out["num_gpus"] = out["num_gpus"].astype(np.int64)
    return out


def load_input(path: str | Path, engine: Any = None) -> tuple[str, Any]:
    """('prediction', Estimate dict) | ('rows', Rows) | ('summary', dict) from a file."""
    from twin.sweep.output import FORMATS, read_rows

    p = Path(path)
    suffix = p.suffix.lower()
    if suffix in FORMATS:
        return "rows", read_rows(p)
    if suffix in (".yaml", ".yml"):
        from twin.engine import Engine

        return "prediction", (engine or Engine()).evaluate(p).to_dict()
    if suffix == ".json":
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except OSError as err:
            raise SpecError(str(path), f"cannot read file: {err.strerror or err}") from err
        except json.JSONDecodeError as err:
            raise SpecError(str(path), f"is not valid JSON: {err}") from err
        if isinstance(data, Mapping) and "breakdown" in data and "step_time_s" in data:
            return "prediction", data
        if isinstance(data, Mapping) and "top" in data:
            return "summary", data
        raise SpecError(str(path), "is neither a prediction (twin predict --json) nor a sweep/plan result")
    raise SpecError(str(path), "must be .parquet/.csv/.jsonl rows, a .json result or a .yaml scenario")


def render(path: str | Path, kind: str = "auto", out: str | Path | None = None, engine: Any = None) -> Path:
    """Render a chart of a prediction or sweep result file; returns the PNG path."""
    if kind not in KINDS:
        raise SpecError("kind", f"must be one of {', '.join(KINDS)} (got {kind!r})")
    what, data = load_input(path, engine)
    src = Path(path)
    if what == "prediction":
        kind = "breakdown" if kind == "auto" else kind
        if kind != "breakdown":
            raise SpecError("kind", f"a single prediction can only be plotted as a breakdown (got {kind!r})")
        target = Path(out) if out else src.with_name(f"{src.stem}-breakdown.png")
        return plot_breakdown(estimate_rows([data], [str(data.get("scenario") or src.stem)]), target,
                              f"Step time: {data['step_time_s']:.3f} s")
    if what == "summary":
        top = _summary_rows(data.get("top") or [])
        if "estimate" in (data.get("top") or [{}])[0]:
            top = estimate_rows([r["estimate"] for r in data["top"]],
                                [f"#{i + 1} {_label(top, i)}" for i in range(len(data["top"]))])
        rows = _summary_rows(data["rows"]) if data.get("rows") else None
        front = _summary_rows(data.get("pareto") or []) if data.get("pareto") else None
        kind = ("pareto" if front is not None else "breakdown") if kind == "auto" else kind
        target = Path(out) if out else src.with_name(f"{src.stem}-{kind}.png")
        if kind == "breakdown":
            return plot_breakdown(top, target, "Step time of the best points")
        base = rows if rows is not None else (front if front is not None else top)
        if kind == "pareto":
            return plot_pareto(base, target, front)
        return plot_scaling(base, target)
    rows = data
    if kind == "auto":
        kind = "scaling" if "num_gpus" in rows and len(set(np.asarray(rows["num_gpus"]).tolist())) > 1 else "pareto"
    target = Path(out) if out else src.with_name(f"{src.stem}-{kind}.png")
    if kind == "breakdown":
        from twin.sweep.reduce import top_rows

        return plot_breakdown(top_rows(rows, "step_time_s", "min", 10), target, "Step time of the 10 fastest points")
    if kind == "scaling":
        return plot_scaling(rows, target)
    return plot_pareto(rows, target)
