"""Per-case analysis of the collectives reference set: predicted vs measured, point by point,
with the model's parts (each candidate algorithm's latency and bandwidth terms).

    python validation/collective_cases.py [validation/reference/collectives.yaml] [--case SUBSTRING] [--all-points]

For every case and point: the message size, measured and predicted busbw and time, the
error, the algorithm/protocol the twin chose, and for that choice its latency term (the
time at one byte) and its bandwidth term (the rest). ``--all-points`` prints every point
of a curve (default: the smallest, the median-error and the largest); ``--options`` adds
every candidate algorithm's time at each printed point.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from twin.core.collectives import bus_factor, collective_cost, collective_options
from twin.core.errors import TwinError
from twin.core.scenario_io import read_mapping
from twin.engine import Engine
from twin.reference import PEAK_MESSAGE_BYTES, collective_setup, ep_predicted_GBps, ep_workload

DEFAULT = Path(__file__).resolve().parent / "reference" / "collectives.yaml"


def _parts(op: str, size: float, setup: Any) -> tuple[float, float, str, str]:
    """(time s, latency s, algorithm, protocol) of the twin's choice at ``size``."""
    cost = collective_cost(op, size, setup.span, setup.hierarchy, setup.algorithm)
    tiny = collective_cost(op, 1.0, setup.span, setup.hierarchy, setup.algorithm)
    return float(cost.time_s), float(tiny.time_s), str(cost.algorithm), str(cost.protocol)


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
    args = ap.parse_args(argv)
    engine = Engine()
    data = read_mapping(args.path)
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
