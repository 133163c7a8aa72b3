"""Per-case analysis of the collectives reference set: predicted vs measured, point by point,
with the model's parts (each candidate algorithm's latency and bandwidth terms).

    python validation/collective_cases.py [validation/reference/collectives.yaml] [--case SUBSTRING] [--all-points]
    python validation/collective_cases.py --terms [--multi-node]

For every case and point: the message size, measured and predicted busbw and time, the
error, the algorithm/protocol the twin chose, and for that choice its latency term (the
time at one byte) and its bandwidth term (the rest). ``--all-points`` prints every point
of a curve (default: the smallest, the median-error and the largest); ``--options`` adds
every candidate algorithm's time at each printed point.

``--terms`` prints one line per case instead: which of the twin's terms dominates it
(latency or bandwidth, at the point ``twin validate`` shows), and what the measurement itself
says about each term: for a curve, the alpha-beta least-squares fit over its sizes from
1/16 of the largest up (slope: the achieved asymptotic busbw; intercept: the fixed time),
of the measured times and of the twin's at the same sizes; for an expert dispatch/combine,
the twin's RDMA and NVLink stage times against the measured kernel time.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from twin.core.collectives import bus_factor, collective_cost, collective_options, dispatch_stages
from twin.core.errors import TwinError
from twin.core.scenario_io import read_mapping
from twin.engine import Engine
from twin.reference import PEAK_MESSAGE_BYTES, collective_setup, ep_predicted_GBps, ep_workload, validate_collectives

DEFAULT = Path(__file__).resolve().parent / "reference" / "collectives.yaml"


def _parts(op: str, size: float, setup: Any) -> tuple[float, float, str, str]:
    """(time s, latency s, algorithm, protocol) of the twin's choice at ``size``."""
    cost = collective_cost(op, size, setup.span, setup.hierarchy, setup.algorithm)
    tiny = collective_cost(op, 1.0, setup.span, setup.hierarchy, setup.algorithm)
    return float(cost.time_s), float(tiny.time_s), str(cost.algorithm), str(cost.protocol)


# A curve's fit uses its points from 1/16 of its largest size up: the bandwidth-bound end,
# where time = intercept + size x bus factor / slope holds (Hockney's alpha-beta model).
_FIT_SPAN = 16.0


@dataclass(frozen=True)
class CaseTerms:
    """Where one case's prediction goes wrong, term by term (times in s, bandwidths in B/s).

    ``latency_share``: the twin's latency term (its time at one byte) over its time at the
    point ``twin validate`` shows. For a curve, ``fit`` holds (intercept s, slope busbw B/s)
    of the measured times and of the twin's at the same sizes (least squares over the
    points from 1/16 of the largest size up); None for a single size. For an expert
    dispatch/combine across domains, ``stages`` holds the twin's RDMA and NVLink stage times
    and ``measured_s`` the kernel time the published figure implies.
    """

    id: str
    nodes: int
    error_pct: float
    latency_share: float
    twin_latency_s: float
    measured_fit: tuple[float, float] | None = None
    twin_fit: tuple[float, float] | None = None
    stages: tuple[float, float] | None = None
    measured_s: float | None = None

    @property
    def regime(self) -> str:
        """'latency' where the twin's latency term is most of its time, else 'bandwidth'."""
        return "latency" if self.latency_share >= 0.5 else "bandwidth"


def fit_alpha_beta(sizes: list[float], times: list[float]) -> tuple[float, float] | None:
    """(intercept s, slope B/s) of time = intercept + size / slope by least squares over the
    (bus-factor-scaled) sizes; None without two distinct sizes or with a non-rising time.
    """
    if len(sizes) < 2 or max(sizes) == min(sizes):
        return None
    mx, my = sum(sizes) / len(sizes), sum(times) / len(times)
    sxx = sum((x - mx) ** 2 for x in sizes)
    per_byte = sum((x - mx) * (y - my) for x, y in zip(sizes, times, strict=True)) / sxx
    if per_byte <= 0:
        return None
    return my - per_byte * mx, 1.0 / per_byte


def case_terms(engine: Engine, case: Any) -> CaseTerms | str:
    """The terms of one collectives case, or why it is not scored (``twin validate``'s reason)."""
    report = validate_collectives(engine, {"cases": [case]})
    if not report.cases:
        return report.skipped[0]["reason"] if report.skipped else "not scored"
    res = report.cases[0]
    setup = collective_setup(engine, case)
    sp, h, op = setup.span, setup.hierarchy, setup.op
    nodes = int(sp.nodes)
    if op.startswith("ep_"):
        wl = ep_workload(case, op)
        pred, cost = ep_predicted_GBps(wl, sp, h)
        measured_s = pred * float(cost.time_s) / res.measured  # counted bytes / published figure
        if sp.m <= 1:
            return CaseTerms(res.id, nodes, res.error_pct, 0.0, 0.0, measured_s=measured_s)
        st = dispatch_stages(wl.token_bytes, wl.tokens, wl.top_k, sp, h, wl.groups)
        lat = float(st.latency_s)
        return CaseTerms(res.id, nodes, res.error_pct, lat / float(cost.time_s), lat,
                         stages=(float(st.rdma_s), float(st.nvlink_s)), measured_s=measured_s)
    shown = min(res.points, key=lambda p: abs(p["measured_busbw_GBps"] - res.measured)) if res.points else None
    size = float(shown["bytes"]) if shown else float(setup.points[0].size or PEAK_MESSAGE_BYTES)
    t, lat, _, _ = _parts(op, size, setup)
    sized = sorted({(p.size, p.busbw) for p in setup.points if p.size and not p.per_nic})
    measured_fit = twin_fit = None
    if sized:
        factor = float(bus_factor(op, setup.n))
        tail = [(s_, b) for s_, b in sized if s_ >= sized[-1][0] / _FIT_SPAN]
        scaled = [s_ * factor for s_, _ in tail]
        measured_fit = fit_alpha_beta(scaled, [s_ * factor / (b * 1e9) for s_, b in tail])
        twin_fit = fit_alpha_beta(scaled, [_parts(op, s_, setup)[0] for s_, _ in tail])
    return CaseTerms(res.id, nodes, res.error_pct, lat / t, lat, measured_fit, twin_fit)


def _print_terms(engine: Engine, cases: list[Any], only: str, multi_node: bool) -> None:
    print(f"{'case':48} {'nodes':>5} {'err%':>7} {'regime':>9} {'lat%':>4} {'twin lat':>8}  "
          f"{'icpt us meas/twin':>17}  {'slope GB/s meas/twin':>20}  EP us: rdma/nvlink/meas")
    for case in cases:
        cid = str(case.get("id", "?"))
        if only not in cid:
            continue
        try:
            got = case_terms(engine, case)
        except TwinError as err:
            print(f"{cid:48} cannot model: {err}")
            continue
        if isinstance(got, str):
            print(f"{cid:48} skipped: {got[:60]}")
            continue
        if multi_node and got.nodes <= 1:
            continue
        icpt = slope = "-"
        if got.measured_fit is not None and got.twin_fit is not None:
            icpt = f"{got.measured_fit[0] * 1e6:.0f}/{got.twin_fit[0] * 1e6:.0f}"
            slope = f"{got.measured_fit[1] / 1e9:.1f}/{got.twin_fit[1] / 1e9:.1f}"
        ep = ""
        if got.stages is not None and got.measured_s is not None:
            ep = f"{got.stages[0] * 1e6:.0f}/{got.stages[1] * 1e6:.0f}/{got.measured_s * 1e6:.0f}"
        print(f"{cid:48} {got.nodes:5d} {got.error_pct:+7.1f} {got.regime:>9} {got.latency_share * 100:4.0f} "
              f"{got.twin_latency_s * 1e6:8.1f}  {icpt:>17}  {slope:>20}  {ep}")


def _fmt_bytes(b: float) -> str:
    for unit, f in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= f:
            return f"{b / f:g}{unit}"
    return f"{b:g}B"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path", nargs="?", default=str(DEFAULT))
    ap.add_argument("--case", default="", help="only cases whose id contains this")
    ap.add_argument("--all-points", action="store_true")
    ap.add_argument("--options", action="store_true", help="print every candidate algorithm")
    ap.add_argument("--terms", action="store_true", help="one line per case: which term dominates it")
    ap.add_argument("--multi-node", action="store_true", help="with --terms: only cases across nodes")
    args = ap.parse_args(argv)
    engine = Engine()
    data = read_mapping(args.path)
    if args.terms:
        _print_terms(engine, list(data.get("cases") or []), args.case, args.multi_node)
        return 0
    for case in data.get("cases") or []:
        cid = str(case.get("id", "?"))
        if args.case not in cid:
            continue
        try:
            setup = collective_setup(engine, case)
        except TwinError as err:
            print(f"{cid}: cannot model: {err}")
            continue
        sp = setup.span
        op = setup.op
        fabric = setup.cluster.scale_out.fabric if setup.cluster.scale_out else "-"
        print(f"\n{cid}  op={op} algo={setup.algorithm} n={setup.n} k/domain={sp.k} domains={sp.m} "
              f"nodes={sp.nodes} top tier={sp.top} fabric={fabric}")
        rows = []
        for pt in setup.points:
            if op.startswith("ep_"):
                wl = ep_workload(case, op)
                pred, cost = ep_predicted_GBps(wl, sp, setup.hierarchy)
                # DeepEP's figure is its counted bytes / kernel time, so the measured time is
                # the counted bytes / the published figure.
                counted = pred * 1e9 * float(cost.time_s)
                rows.append((wl.dispatched_bytes, pt.busbw, pred, counted / (pt.busbw * 1e9), float(cost.time_s),
                             0.0, str(cost.algorithm), str(cost.protocol)))
                continue
            size = pt.size or PEAK_MESSAGE_BYTES
            t, lat, algo, proto = _parts(op, size, setup)
            factor = bus_factor(op, setup.n)
            meas_t = size * factor / (pt.busbw * 1e9)
            pred = size * factor / t / 1e9
            if pt.per_nic:
                pred = float("nan")  # per-NIC: see twin validate (the reader converts)
            rows.append((size, pt.busbw, pred, meas_t, t, lat, algo, proto))
        if not rows:
            print("  (no scored points)")
            continue
        errs = [abs(r[2] - r[1]) / r[1] if r[2] == r[2] else 0.0 for r in rows]
        order = sorted(range(len(rows)), key=lambda i: errs[i])
        mid = order[len(order) // 2]
        show = range(len(rows)) if args.all_points else sorted({0, mid, len(rows) - 1})
        print(f"  {'size':>8} {'meas GB/s':>10} {'pred GB/s':>10} {'err%':>7} {'meas us':>9} {'pred us':>9} "
              f"{'lat us':>8} {'bw us':>9}  choice")
        for i in show:
            size, meas, pred, mt, pt_, lat, algo, proto = rows[i]
            err = (pred - meas) / meas * 100 if pred == pred else float("nan")
            mts = f"{mt * 1e6:9.1f}" if mt is not None else f"{'-':>9}"
            mark = " <median" if i == mid and len(rows) > 1 else ""
            print(f"  {_fmt_bytes(size):>8} {meas:10.3f} {pred:10.3f} {err:+7.1f} {mts} {pt_ * 1e6:9.1f} "
                  f"{lat * 1e6:8.1f} {(pt_ - lat) * 1e6:9.1f}  {algo}/{proto}{mark}")
            if args.options and not op.startswith("ep_") and op not in ("all_to_all", "send_recv"):
                for t, a, p, _ in collective_options(op, size, sp, setup.hierarchy):
                    print(f"{'':>60}{a}/{p}: {float(t) * 1e6:.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
