"""Sweep throughput: a >= 1,000,000-point sweep inline and on a local 2-CPU Ray.

    python benchmarks/bench_sweep.py [--executor both|inline|ray] [--num-cpus 2] [--scale 1.0]

The sweep: every plan on a grid of tp(4) x pp(5) x vp(6) x cp(2) x ep(2) x mbs(3) x
recompute(3) x sharding(2) x gbs(2) for 3 models (Llama 3.1 70B and 405B, Mixtral 8x7B)
x 10 cluster sizes (256 to 16,384 H100s) x 2 scale-out fabrics (InfiniBand, RoCE)
= 1,036,800 points. Points that break a
rule (degrees that do not divide, out of memory) are counted by reason like in any sweep;
the figures below give both all points per second and fully evaluated points per second.

The process keeps its freed memory as ``twin sweep`` and the sweep's Ray tasks do
(``twin.sweep.allocator``); ``TWIN_SWEEP_RETAIN_MEMORY=0`` measures glibc's defaults.

Prints wall time and CPU time (the machine may be shared), points/s per executor, the
Ray/inline ratio (Ray's start-up, the cluster and a warm-up task per CPU, reported
separately), and checks that both give identical results. Aims (issue 9): >= 1,000,000
points/s and >= 200,000 fully evaluated points/s per core inline; Ray on 2 CPUs >= 1.7x.
"""

from __future__ import annotations

import argparse
import os
import resource
import time

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # keep a local Ray on 127.0.0.1

from twin.sweep.allocator import ENV as RETAIN_ENV
from twin.sweep.allocator import retain_freed_memory
from twin.sweep.job import EngineSettings
from twin.sweep.runner import run_job, sweep_job
from twin.sweep.sweep_spec import parse_spec

SIZES = [256, 512, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 16384]


def spec(scale: float) -> dict:
    sizes = SIZES[: max(1, round(len(SIZES) * scale))]
    return {
        "name": "bench-3-models-10-sizes-2-fabrics",
        "base": {"cluster": {"system": "DGX-H100", "num_gpus": 1024}, "model": "llama3.1-70b",
                 "plan": {"gbs": 2048, "precision": "bf16"}},
        "axes": [
            {"path": "model", "values": ["llama3.1-70b", "llama3.1-405b", "mixtral-8x7b"]},
            {"path": "cluster.num_gpus", "values": sizes},
            {"path": "cluster.scale_out.fabric", "values": ["infiniband", "roce"]},
            {"path": "plan.tp", "values": [1, 2, 4, 8]},
            {"path": "plan.pp", "values": [1, 2, 4, 8, 16]},
            {"path": "plan.cp", "values": [1, 2]},
            {"path": "plan.ep", "values": [1, 8]},
            {"path": "plan.mbs", "values": [1, 2, 4]},
            {"path": "plan.recompute", "values": ["none", "selective", "full"]},
            {"path": "plan.optimizer_sharding", "values": ["distributed_optimizer", "fsdp"]},
            {"path": "plan.vp", "values": [1, 2, 3, 4, 6, 8]},
            {"path": "plan.gbs", "values": [1024, 2048]},
        ],
        "objective": {"metric": "step_time_s", "top": 10},
    }


def cpu_s(children: bool = False) -> float:
    who = resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def timed(label: str, fn):
    w0, c0 = time.perf_counter(), cpu_s()
    out = fn()
    wall, cpu = time.perf_counter() - w0, cpu_s() - c0
    return out, wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--executor", choices=("both", "inline", "ray"), default="both")
    ap.add_argument("--num-cpus", type=int, default=2)
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of the cluster sizes (quick runs)")
    ap.add_argument("--batch-points", type=int, default=None, help="Ray batch size (default ~8 batches per CPU)")
    ap.add_argument("--repeats", type=int, default=3, help="runs per executor; the best (warm) is reported")
    args = ap.parse_args()
    retained = retain_freed_memory()  # as `twin sweep` does
    print(f"allocator: {'freed memory kept' if retained else 'glibc defaults'} ({RETAIN_ENV}="
          f"{'1' if retained else '0'})")
    settings = EngineSettings(autoload=False)
    engine = settings.build()
    job = sweep_job(parse_spec(spec(args.scale)), engine, settings)
    print(f"sweep: {job.total:,} points; each executor run {args.repeats} times (first: cold caches; "
          "best: warm)")
    results = {}
    if args.executor in ("both", "inline"):
        walls = []
        for _ in range(args.repeats):
            r, wall, _ = timed("inline", lambda: run_job(job, engine=engine, executor="inline"))
            walls.append(wall)
        best = min(walls)
        results["inline"] = (r, best)
        print(f"inline: first {walls[0]:.2f} s, best {best:.2f} s wall -> {r.done / best:,.0f} points/s; "
              f"feasible {r.feasible:,} ({r.feasible / best:,.0f} fully evaluated points/s); "
              f"strategy groups {r.stats.get('groups', 0):,}")
    if args.executor in ("both", "ray"):
        from twin.sweep.ray_exec import RayExecutor

        # Ray's start-up: the local cluster, then one warm-up task per CPU (imports, engines).
        ex, start_s, _ = timed("ray start", lambda: RayExecutor(num_cpus=args.num_cpus, warm=(settings,)))
        try:
            walls = []
            c0 = cpu_s(children=False)
            for _ in range(args.repeats):
                r, wall, _ = timed("ray", lambda: run_job(job, engine=engine, executor=ex,
                                                                batch_points=args.batch_points))
                walls.append(wall)
            driver_cpu = (cpu_s() - c0) / args.repeats
        finally:
            ex.close()
        best = min(walls)
        results["ray"] = (r, best)
        print(f"ray ({ex.workers} CPUs): start-up {start_s:.1f} s (cluster + warm-up of {ex.warmed} workers); "
              f"sweep first {walls[0]:.2f} s, best {best:.2f} s wall -> {r.done / best:,.0f} points/s "
              f"({r.done / (best + start_s):,.0f} with start-up); driver CPU {driver_cpu:.2f} s a run; "
              f"retried batches {r.retried}")
    if len(results) == 2:
        (a, wa), (b, wb) = results["inline"], results["ray"]
        same = a.counts == b.counts and a.feasible == b.feasible and all(
            (a.top[k] == b.top[k]).all() for k in ("point_id", "step_time_s"))
        print(f"ratio ray/inline: {wa / wb:.2f}x (best runs, start-up excluded); identical results: {same}")


if __name__ == "__main__":
    main()
