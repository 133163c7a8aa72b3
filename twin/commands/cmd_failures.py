"""``twin failures SCENARIO.yaml``: what each failure costs the job, and the fleet's goodput.

Examples::

    twin failures examples/llama3-405b-16k-roce.yaml            # goodput figures
    twin failures examples/gpt3-175b-dgx-h100-ib.yaml --rank    # criticality ranking + redundancy
    twin failures SCN.yaml --inject switch_down:tier=spine --inject straggler:fraction=0.7
    twin failures SCN.yaml --monte-carlo 200 --spares 4 --json
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from typing import Any

from twin.commands.cmd_render import console, print_json, table
from twin.core import schema
from twin.core.errors import SpecError
from twin.core.failures.analysis import FailureReport
from twin.core.failures.failure_spec import INJECT_KINDS, MonteCarloSpec, parse_injection
from twin.core.units import HOUR_S, human, plain
from twin.engine import Engine
from twin.failure_analyzer import FailureAnalyzer


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``failures`` verb."""
    p = sub.add_parser(
        "failures", help="failure scenarios: interruptions, effective training time, criticality ranking",
        description="Expected interruptions, optimal checkpoint interval and effective training time of a job; "
                    "what an injected failure costs it; which components are most critical.")
    p.add_argument("scenario", help="scenario file (YAML or JSON); an optional 'failures:' section is read")
    p.add_argument("--inject", action="append", default=[], metavar="KIND[:key=value,...]",
                   help=f"inject a failure ({', '.join(INJECT_KINDS)}), e.g. switch_down:tier=spine or "
                        "link_degraded:component=link.leaf-spine,lanes_fraction=0.5; repeatable")
    p.add_argument("--rank", action="store_true", help="rank component failures by expected cost, with redundancy")
    p.add_argument("--pairs", action="store_true", help="also evaluate pairs of concurrent degradations")
    p.add_argument("--monte-carlo", type=int, nargs="?", const=200, default=None, metavar="TRIALS",
                   help="simulate TRIALS runs over the horizon (spares, overlapping failures); default 200")
    p.add_argument("--horizon-days", type=float, default=30.0, help="Monte-Carlo horizon in days (default 30)")
    p.add_argument("--seed", type=int, default=0, help="Monte-Carlo seed (default 0)")
    p.add_argument("--ray", action="store_true",
                   help="run the Monte-Carlo batches as Ray tasks (the current session, --ray-address, "
                        "RAY_ADDRESS, or a local Ray started and stopped for this run)")
    p.add_argument("--ray-address", default=None, help="Ray cluster to join for --ray (host:port)")
    p.add_argument("--spares", type=int, default=None, metavar="N", help="hot spare nodes held by the job")
    p.add_argument("--elastic", action="store_true", help="allow shrinking data parallelism after a failure")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument("--no-plugins", action="store_true", help="do not autoload third-party plugins")
    p.set_defaults(func=run)


def _h(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "inf"
    if seconds >= HOUR_S:
        return f"{seconds / HOUR_S:.2f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.1f} s"


def _per_day(hours: float) -> str:
    """Expected hours lost a day, in the unit that reads (a tiny cost in ms, not 5.05e-06 h)."""
    seconds = hours * HOUR_S
    return _h(seconds) if seconds >= 1.0 else human(seconds, "s", 2)


def render(rep: FailureReport) -> None:
    """Human-readable tables of a failure report."""
    out = console()
    f, ck = rep.figures, rep.checkpoint
    t = table(f"Failures of {rep.scenario or 'scenario'} ({rep.num_gpus:,} GPUs, step {rep.nominal.step_time_s:.2f} s)",
              "figure", "value")
    t.add_row("unexpected interruptions per day", f"{f['expected_interruptions_per_day']:.2f}")
    t.add_row("mean time between interruptions", _h(f["mean_time_between_interruptions_h"] * HOUR_S))
    t.add_row("effective training time", f"{f['effective_training_time_pct']:.1f}%")
    t.add_row("checkpoint size / write", f"{ck['size_tb']:.2f} TB / {_h(ck['blocking_write_s'])}")
    t.add_row("checkpoint interval (Daly optimum)",
              f"{_h(f['checkpoint_interval_s'])} ({_h(f['optimal_checkpoint_interval_s'])})")
    t.add_row("mean restart", _h(f["mean_restart_s"]))
    t.add_row("lost work per interruption", _h(f["lost_work_per_interruption_s"]))
    t.add_row("degraded (re-routed) events per day", f"{f['degraded_events_per_day']:.2f}")
    t.add_row("goodput", f"{f['goodput_tokens_per_s']:,.0f} tokens/s")
    out.print(t)
    lost = table("Wall time lost", "to", "share")
    for k, v in f["time_lost_pct"].items():
        lost.add_row(k, f"{v:.2f}%")
    out.print(lost)
    for inj in rep.injections:
        it = table(f"Injected: {inj['injection']} -> {inj['outcome']}", "option", "cost", "restart", "lost work",
                   "throughput", "detail")
        for o in inj["options"]:
            it.add_row(o["option"], _h(o["cost_s"]), _h(o["downtime_s"]), _h(o["lost_work_s"]),
                       f"{o['throughput_fraction']:.3f}", o["detail"])
        for o in inj["not_possible"]:
            it.add_row(o["option"], "-", "-", "-", "-", f"not possible: {o['why']}")
        out.print(it)
        extra = f"  step {inj['nominal_step_time_s']:.3f} s -> {inj['step_time_s']:.3f} s"
        if "degraded" in inj:
            extra += f"; degraded step {inj['degraded']['step_time_s']:.3f} s (x{inj['degraded']['slowdown']:.3f})"
        if "uplink_capacity_fraction" in inj:
            extra += f"; switch up-capacity {100 * inj['uplink_capacity_fraction']:.0f}%"
        out.print(extra)
    if rep.ranking is not None:
        rt = table("Criticality (expected cost), ranked", "#", "component", "count", "events per day",
                   "cost per event", "cost per day", "share", "outcome", "slowdown", compact=True)
        for r in rep.ranking:
            rt.add_row(str(r["rank"]), r["component"], f"{r['count']:,}",
                       "n/a" if r["events_per_day"] is None else plain(r["events_per_day"], 2),
                       _h(r["cost_per_event_s"]),
                       "n/a" if r["expected_cost_h_per_day"] is None else _per_day(r["expected_cost_h_per_day"]),
                       "" if r["share_pct"] is None else f"{r['share_pct']:.1f}%", r["outcome"].replace("_", "\n"),
                       f"{r['slowdown']:.3f}")
        out.print(rt)
    if rep.pairs:
        pt = table("Pairs (same place, worst case)", "pair", "slowdown", "alone", "overlaps per year",
                   "extra h per day")
        for p in rep.pairs:
            alone = " / ".join(f"{s:.3f}" for s in p["slowdowns_alone"])
            pt.add_row(" + ".join(p["pair"]), f"{p['slowdown']:.3f}", alone, plain(p["overlaps_per_year"]),
                       plain(p["expected_extra_cost_h_per_day"]))
        out.print(pt)
    if rep.redundancy:
        vt = table("Redundancy: what it buys", "variant", "ETT", "d ETT", "goodput", "per GPU owned", "cost")
        for v in rep.redundancy:
            cost = ", ".join(f"{k} {val}" for k, val in v["cost"].items()) or "-"
            vt.add_row(v["variant"], f"{v['effective_training_time_pct']:.2f}%", f"{v['delta_ett_pct_points']:+.2f}",
                       f"{v['goodput_gain_pct']:+.2f}%", f"{v['goodput_per_gpu_owned_gain_pct']:+.2f}%", cost)
        out.print(vt)
    if rep.monte_carlo:
        mc = rep.monte_carlo
        out.print(f"Monte-Carlo ({mc['trials']} x {mc['horizon_days']:.0f} days): effective training time "
                  f"{mc['effective_training_time_pct']:.2f}% (p5 {mc['effective_training_time_pct_p5']:.2f}%, "
                  f"p95 {mc['effective_training_time_pct_p95']:.2f}%; closed form "
                  f"{mc['closed_form_effective_training_time_pct']:.2f}%), "
                  f"{mc['expected_interruptions_per_day']:.2f} interruptions/day, "
                  f"{mc['spare_shortfalls_per_day']:.3f} spare shortfalls/day")
    for note in rep.notes:
        out.print(f"note: {note}")


def run(args: argparse.Namespace) -> int:
    """Analyse the scenario and print it."""
    fa = FailureAnalyzer(Engine(autoload=False if args.no_plugins else None))
    scenario, spec = fa.load(args.scenario)
    injections = tuple(parse_injection(text, i + len(spec.inject)) for i, text in enumerate(args.inject))
    changes: dict[str, Any] = {"inject": spec.inject + injections}
    if args.spares is not None:
        if args.spares < 0:
            raise SpecError("--spares", f"must be >= 0 (got {args.spares})")
        changes["spare_nodes"] = args.spares
    if args.elastic:
        changes["elastic"] = True
    spec = dataclasses.replace(spec, **changes)
    mc = None
    if args.monte_carlo is not None:
        base = spec.monte_carlo or MonteCarloSpec()
        mc = schema.load(MonteCarloSpec, {"trials": args.monte_carlo, "horizon_days": args.horizon_days,
                                          "seed": args.seed, "batch_trials": base.batch_trials}, "--monte-carlo")
    executor = None
    if mc is not None and (args.ray or args.ray_address):
        from twin.sweep.ray_exec import RayExecutor

        executor = RayExecutor(address=args.ray_address)
    try:
        report = fa.analyze(scenario, failures=spec, rank=args.rank, pairs=args.pairs, monte_carlo=mc,
                            mapper=executor.mapper if executor is not None else None)
    finally:
        if executor is not None:
            executor.close()
    if args.json:
        print_json(report.to_dict())
    else:
        render(report)
    return 0
