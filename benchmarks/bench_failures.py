"""Failure analysis speed and headline figures (issue: the ranking completes in seconds).

    python benchmarks/bench_failures.py [--repeat 5] [--trials 200]

1. Criticality ranking of every single-component failure class on the 1,024-GPU
   InfiniBand example (GPT-3 175B, DGX H100, rail-optimised NDR), with pairs and the
   redundancy variants: wall time, model evaluations, top entries.
2. Llama 3 405B on 16,384 H100 (RoCE) with the published per-cause counts as rates:
   interruption interval and effective training time vs the published figures.
3. Monte-Carlo: trials x 30 days of the Llama 3 job, inline (one process).
"""

from __future__ import annotations

import argparse
import statistics
import time

from twin.core.failures.failure_spec import MonteCarloSpec
from twin.engine import Engine
from twin.failure_analyzer import FailureAnalyzer

IB_1024 = "examples/gpt3-175b-dgx-h100-ib.yaml"
LLAMA = "examples/llama3-405b-16k-roce.yaml"
PUBLISHED_MTBI_H = 54 * 24 / 419


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--trials", type=int, default=200)
    args = ap.parse_args()
    fa = FailureAnalyzer(Engine(autoload=False))

    times = []
    rep = None
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        rep = fa.analyze(IB_1024, rank=True, pairs=True)
        times.append(time.perf_counter() - t0)
    assert rep is not None and rep.ranking is not None
    classes = len(rep.classes)
    print(f"ranking, 1,024-GPU IB ({classes} failure classes over {len(rep.inventory.groups)} component groups, "
          f"pairs + {len(rep.redundancy or [])} redundancy variants): median {statistics.median(times):.3f} s, "
          f"min {min(times):.3f} s, {rep.evaluations} model evaluations in the base analysis")
    print("  top entries (expected lost job-hours per day):")
    for r in rep.ranking[:8]:
        cost = "n/a (no published rate)" if r["expected_cost_h_per_day"] is None else \
            f"{r['expected_cost_h_per_day']:.4f} h/day ({r['share_pct']:.1f}%)"
        print(f"  {r['rank']:>2}. {r['component']:<16} x{r['count']:<6,} {cost:<28} "
              f"{r['cost_per_event_s'] / 60:7.1f} min/event  -> {r['outcome']}")
    for v in rep.redundancy or []:
        print(f"  redundancy {v['variant']:<12} ETT {v['effective_training_time_pct']:.2f}% "
              f"({v['delta_ett_pct_points']:+.2f} pts), "
              f"goodput per GPU owned {v['goodput_per_gpu_owned_gain_pct']:+.2f}%")

    t0 = time.perf_counter()
    llama = fa.analyze(LLAMA, rank=True)
    dt = time.perf_counter() - t0
    f = llama.figures
    print(f"\nLlama 3 405B, 16,384 H100 RoCE ({dt:.2f} s with ranking):")
    print(f"  interruptions/day {f['expected_interruptions_per_day']:.2f} (published 419/54 = {419 / 54:.2f})")
    mtbi = f["mean_time_between_interruptions_h"]
    print(f"  mean time between interruptions {mtbi:.2f} h "
          f"(published {PUBLISHED_MTBI_H:.2f} h, {100 * (mtbi / PUBLISHED_MTBI_H - 1):+.1f}%)")
    print(f"  effective training time {f['effective_training_time_pct']:.1f}% (published > 90%)")
    print(f"  checkpoint {llama.checkpoint['size_tb']:.1f} TB, write {llama.checkpoint['write_s']:.1f} s, "
          f"Daly interval {f['optimal_checkpoint_interval_s']:.0f} s, mean restart {f['mean_restart_s']:.0f} s")
    print("  time lost: " + ", ".join(f"{k} {v:.2f}%" for k, v in f["time_lost_pct"].items()))

    t0 = time.perf_counter()
    mc = fa.analyze(LLAMA, monte_carlo=MonteCarloSpec(trials=args.trials, horizon_days=30)).monte_carlo
    dt = time.perf_counter() - t0
    assert mc is not None
    print(f"\nMonte-Carlo {args.trials} x 30 days (Llama 3): {dt:.2f} s; ETT {mc['effective_training_time_pct']:.2f}% "
          f"(p5 {mc['effective_training_time_pct_p5']:.2f}, p95 {mc['effective_training_time_pct_p95']:.2f}; "
          f"closed form {mc['closed_form_effective_training_time_pct']:.2f}%), "
          f"{mc['expected_interruptions_per_day']:.2f} interruptions/day")


if __name__ == "__main__":
    main()
