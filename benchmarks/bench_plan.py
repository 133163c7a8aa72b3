"""``twin plan`` timings: the plan search of two large runs, one core, inline executor.

    python benchmarks/bench_plan.py [--no-prune] [--cases 405b,dsv3] [--headroom H]

- ``405b``: Llama 3.1 405B on 16,384 H100 (``DGX-H100``), the default global batch;
- ``dsv3``: DeepSeek-V3 on 16,384 GB200 (``GB200-NVL72``), the default global batch.

For each: the plans in the space, the wall and CPU seconds of ``search_plans`` (top 5, the
CLI's default; the five best re-evaluated with the full model, as ``twin plan`` does), plans
per second and per CPU-second, how many were pruned, did not fit (in HBM, or leaving
``--headroom`` of it free: default 0, ``twin plan``'s is 0.1), or were costed in full, and the
best plan.
``--no-prune`` searches every plan in full (the reference the pruned search must agree
with: the same best plans). The process pins itself to one core where the OS allows; the
machine may be shared, so compare figures of one run (CPU seconds are the steadier ones).
"""

from __future__ import annotations

import argparse
import os
import time

from twin.core.results import HEADROOM_REASON, MEMORY_REASON, PRUNED_REASON
from twin.engine import Engine
from twin.sweep.plansearch import search_plans, space_for

CASES = {"405b": ("llama3.1-405b", "DGX-H100", 16384), "dsv3": ("deepseek-v3", "GB200-NVL72", 16384)}
PLAN_FIELDS = ("tp", "pp", "vp", "cp", "ep", "mbs", "recompute", "sharding")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-prune", action="store_true", help="cost every plan in full")
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    ap.add_argument("--headroom", type=float, default=0.0, help="share of HBM plans must leave free (default 0)")
    args = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    engine = Engine(autoload=False)
    for key in args.cases.split(","):
        model, system, gpus = CASES[key]
        space = space_for(engine, model, system, gpus)
        wall, cpu = time.perf_counter(), time.process_time()
        res = search_plans(engine, space, top=5, prune=not args.no_prune, memory_headroom=args.headroom)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        counts = res.result.counts
        best = res.plans()[0]
        print(f"{key}: {model} on {gpus} x {system}: {space.total:,} plans, {wall:.1f} s wall, {cpu:.1f} s CPU "
              f"({space.total / wall:,.0f} plans/s, {space.total / cpu:,.0f} per CPU-second); "
              f"pruned {counts.get(PRUNED_REASON, 0):,}, did not fit {counts.get(MEMORY_REASON, 0):,}, "
              f"not leaving {100 * args.headroom:g}% free {counts.get(HEADROOM_REASON, 0):,}, "
              f"costed {res.result.feasible:,}")
        print(f"  best: {', '.join(f'{f} {best[f]}' for f in PLAN_FIELDS)}: {best['step_time_s']:.4f} s, "
              f"{best['memory_gib']:.1f} GiB")


if __name__ == "__main__":
    main()
