"""``twin plan --model M --system S --gpus N``: search every valid plan, print the fastest that fit."""

from __future__ import annotations

import argparse
import typing
from typing import Any

from twin.commands.cmd_render import console, print_json, table
from twin.commands.cmd_sweep import drive, top_table
from twin.core.errors import SpecError
from twin.core.results import PRUNED_REASON
from twin.core.specs import Schedule
from twin.sweep.job import EngineSettings
from twin.sweep.plansearch import (
    DEFAULT_MEMORY_HEADROOM,
    RECOMPUTE,
    SHARDINGS,
    PlanSearchResult,
    search_plans,
    space_for,
)
from twin.sweep.runner import EXECUTORS


def _csv(kind: type, name: str) -> Any:
    def parse(text: str) -> tuple[Any, ...]:
        try:
            return tuple(kind(x) for x in text.split(",") if x)
        except ValueError as err:
            raise argparse.ArgumentTypeError(f"{name}: {err}") from err
    return parse


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``plan`` verb."""
    p = sub.add_parser("plan", help="search all valid parallel plans for the fastest that fits in memory",
                       description="Enumerate every valid plan (tp, pp, vp, dp, cp, ep, mbs, recompute, optimizer "
                                   "sharding) of a model on N GPUs of a system, rank those that fit in memory by "
                                   "step time and print the best with their step-time breakdowns.")
    p.add_argument("--model", required=True, help="model preset name or file (model mapping or scenario)")
    p.add_argument("--system", required=True, help="system preset name or file (cluster mapping or scenario)")
    p.add_argument("--gpus", required=True, type=int, help="number of GPUs")
    p.add_argument("--gbs", type=int, default=None, help="global batch in sequences (default: ~4M tokens)")
    p.add_argument("--seq-len", type=int, default=None, help="sequence length (default: the model's)")
    p.add_argument("--top", type=int, default=5, help="how many plans to print (default 5)")
    p.add_argument("--precision", type=_csv(str, "precision"), default=None,
                   help="comma-separated precisions to try (default bf16)")
    p.add_argument("--sharding", type=_csv(str, "sharding"), default=tuple(SHARDINGS),
                   help=f"comma-separated optimizer shardings (default all: {','.join(SHARDINGS)})")
    p.add_argument("--recompute", type=_csv(str, "recompute"), default=RECOMPUTE,
                   help="comma-separated recompute settings (default none,selective,full)")
    p.add_argument("--max-tp", type=int, default=None, help="largest tensor-parallel degree to try")
    p.add_argument("--schedule", type=_csv(str, "schedule"), default=None,
                   help="pipeline schedules to search, comma-separated (plan.schedule: 1f1b, interleaved, "
                        "zero_bubble_h1, zero_bubble_h2, zero_bubble_v, dualpipe, dualpipev), or 'all' for every "
                        "one of them; each is searched with the pipelined plans and interleaving depths it runs, "
                        "and the best of all are ranked together (default auto: interleaved when vp > 1)")
    p.add_argument("--software", default=None,
                   help="framework stack preset (default megatron-core-te; see twin plugins)")
    p.add_argument("--memory-headroom", type=float, default=DEFAULT_MEMORY_HEADROOM,
                   help=f"fraction of HBM a plan must leave free to count as fitting (default "
                        f"{DEFAULT_MEMORY_HEADROOM:g}: what runs lose beyond the twin's count, allocator "
                        "fragmentation and cached blocks, workspaces; vLLM's gpu_memory_utilization 0.9; 0 ranks "
                        "plans up to the last byte of HBM, each flagged 'tight'; docs/sweeps.md, Memory headroom)")
    p.add_argument("--no-prune", action="store_true",
                   help="cost every plan in full (default: skip plans that cannot beat the best found even "
                        "without communication; the best plans are the same)")
    p.add_argument("--executor", choices=EXECUTORS, default="inline", help="inline (default), ray or auto")
    p.add_argument("--ray-address", default=None, help="Ray cluster address")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--explain", action="store_true",
                   help="say why the best plan beats the runner-up: how their plans differ and which parts of "
                        "the step make up the difference")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (none is drawn off a terminal)")
    p.add_argument("--no-plugins", action="store_true", help="do not autoload third-party plugins")
    p.set_defaults(func=run)


def schedules_of(stated: tuple[str, ...] | None) -> list[str | None]:
    """The schedules ``--schedule`` asks for (None: the base plan's auto); 'all': every named one."""
    if stated is None:
        return [None]
    names = list(typing.get_args(Schedule))
    if "all" in stated:
        return [s for s in names if s != "auto"]
    unknown = [s for s in stated if s not in names]
    if unknown:
        raise SpecError("plan.schedule", f"must be one of {', '.join(names)} or all (got {unknown[0]!r})")
    return list(dict.fromkeys(stated))


def run(args: argparse.Namespace) -> int:
    """Search and print."""
    settings = EngineSettings(autoload=False if args.no_plugins else None)
    engine = settings.build()
    top = max(2 if args.explain else 1, args.top)
    searches = []
    for schedule in schedules_of(args.schedule):
        space = space_for(engine, args.model, args.system, args.gpus, gbs=args.gbs, seq_len=args.seq_len,
                          shardings=args.sharding, recompute=args.recompute, precisions=args.precision,
                          max_tp=args.max_tp, software=args.software,
                          plan=None if schedule is None else {"schedule": schedule})
        searches.append(search_plans(engine, space, top=top, executor=args.executor, ray_address=args.ray_address,
                                     settings=settings, memory_headroom=args.memory_headroom,
                                     prune=not args.no_prune, runner=lambda job: drive(job, engine, args)))
    if len(searches) > 1:
        return _render_many(searches, args, top)
    res = searches[0]
    space = res.space
    if args.json:
        doc = res.to_dict()
        if args.explain:
            doc["explain"] = explain(res.plans())
        print_json(doc)
        return 0
    out = console()
    r = res.result
    head = table(f"Plan search: {space.name}, gbs {space.base.gbs}, seq {space.model.seq_len}", "", "value")
    head.add_row("plans searched", f"{r.done:,} ({len(space.groups):,} groups x interleaving depths)")
    pruned = res.pruned
    # Pruned plans fit in memory; they are slower than the best found, so not costed in full.
    head.add_row("fit in memory", f"{r.feasible + pruned:,}")
    if pruned:
        head.add_row("  costed in full", f"{r.feasible:,}")
        head.add_row("  pruned (slower than the best even without communication)", f"{pruned:,}")
    for reason, n in sorted(r.counts.items(), key=lambda kv: -kv[1]):
        if reason != PRUNED_REASON:
            head.add_row(f"  {reason}", f"{n:,}")
    head.add_row("memory headroom", f"{100 * res.memory_headroom:g}% of HBM left free by every plan ranked")
    head.add_row("time", f"{res.seconds:.2f} s ({r.done / max(res.seconds, 1e-9):,.0f} plans/s, {r.executor})")
    out.print(head)
    if not res.plans():
        out.print(f"no plan fits in memory leaving {100 * args.memory_headroom:g}% of HBM free")
        return 0
    out.print(top_table(r.top, "step_time_s", f"Fastest {len(res.plans())} plans that fit"))
    for i, plan in enumerate(res.plans(), 1):
        est = plan["estimate"]
        out.print(f"\n#{i}: tp{plan['tp']} pp{plan['pp']} vp{plan['vp']} dp{est['dp']} cp{plan['cp']} ep{plan['ep']} "
                  f"mbs{plan['mbs']} recompute={plan['recompute']} sharding={plan['sharding']}"
                  f"{'' if args.schedule is None else ' schedule=' + space.base.schedule}: "
                  f"{est['step_time_s']:.3f} s, MFU {100 * est['mfu']:.1f}%, {_memory_text(plan)}")
        t = table("", "part", "seconds", "share")
        for name, v in _parts(est).items():
            if v > 0 or name == "compute":
                t.add_row(name, f"{v:.4f}", f"{100 * v / est['step_time_s']:.1f}%")
        out.print(t)
    if args.explain:
        render_explain(explain(res.plans()))
    return 0


# The terms of a plan's HBM (MemoryBreakdown.as_gib), which add up to its total_gib.
MEMORY_TERMS = ("weights_gib", "gradients_gib", "optimizer_gib", "activations_gib", "logits_gib", "runtime_gib")

PLAN_KEYS = ("schedule", "tp", "pp", "vp", "cp", "ep", "etp", "mbs", "recompute", "sharding", "precision")


def merged_plans(searches: list[PlanSearchResult], top: int) -> list[dict[str, Any]]:
    """The best ``top`` plans of several searches (one per schedule), each with its ``schedule``:
    by step time, ties to the plan with more memory free (as one search ranks them).
    """
    rows = [{**row, "schedule": res.space.base.schedule} for res in searches for row in res.plans()
            if row.get("estimate")]
    rows.sort(key=lambda r: (r["estimate"]["step_time_s"], r["estimate"]["memory"]["total_gib"]))
    return rows[:top]


def _render_many(searches: list[PlanSearchResult], args: argparse.Namespace, top: int) -> int:
    """Several schedules' searches: their counts, then the best plans of all of them together."""
    plans = merged_plans(searches, top)
    if args.json:
        doc: dict[str, Any] = {"searches": [{k: v for k, v in r.to_dict().items() if k != "top"} | {
            "schedule": r.space.base.schedule} for r in searches], "top": plans}
        if args.explain:
            doc["explain"] = explain(plans)
        print_json(doc)
        return 0
    out = console()
    first = searches[0].space
    head = table(f"Plan search: {first.name}, gbs {first.base.gbs}, seq {first.model.seq_len}, "
                 f"{len(searches)} schedules", "schedule", "plans", "fit in memory", "seconds")
    for r in searches:
        res = r.result
        head.add_row(r.space.base.schedule, f"{res.done:,}", f"{res.feasible + res.counts.get(PRUNED_REASON, 0):,}",
                     f"{r.seconds:.2f}")
    out.print(head)
    if not plans:
        out.print(f"no plan fits in memory leaving {100 * args.memory_headroom:g}% of HBM free")
        return 0
    t = table(f"Fastest {len(plans)} plans that fit, over every schedule", "#", "schedule", "tp", "pp", "vp", "cp",
              "ep", "mbs", "recompute", "sharding", "step s", "MFU", "GiB", "HBM", "risk")
    for i, plan in enumerate(plans, 1):
        est = plan["estimate"]
        t.add_row(str(i), plan["schedule"], *(str(plan[k]) for k in ("tp", "pp", "vp", "cp", "ep", "mbs")),
                  str(plan["recompute"]), str(plan["sharding"]), f"{est['step_time_s']:.3f}",
                  f"{100 * est['mfu']:.1f}%", f"{est['memory']['total_gib']:.1f}",
                  f"{100 * plan['memory_risk']['hbm_share']:.0f}%", plan["memory_risk"]["risk"])
    out.print(t)
    if args.explain:
        render_explain(explain(plans))
    return 0


def _memory_text(plan: dict[str, Any]) -> str:
    """A plan's memory with its risk: GiB, share of HBM, GiB free, and a warning when tight."""
    est, risk = plan["estimate"], plan["memory_risk"]
    text = (f"{est['memory']['total_gib']:.1f} GiB ({100 * risk['hbm_share']:.0f}% of HBM, "
            f"{risk['free_gib']:.1f} GiB free)")
    if risk["risk"] == "tight":
        text += (f"; TIGHT: leaves less than {100 * risk['headroom']:g}% of HBM free, what runs lose beyond "
                 "the twin's count")
    return text


def _parts(est: dict[str, Any]) -> dict[str, float]:
    """The step's parts in print order: compute, recompute, exposed comm per dimension, the rest."""
    bd = est["breakdown"]
    parts = {"compute": bd["compute_s"], "recompute": bd["recompute_s"]}
    parts.update({f"exposed {k}": v for k, v in sorted(bd["exposed_comm_s"].items())})
    parts.update({"bubble": bd["bubble_s"], "optimizer": bd["optimizer_s"], "offload": bd["offload_s"],
                  "overlap interference": bd["overlap_interference_s"]})
    return parts


def explain(plans: list[dict[str, Any]]) -> dict[str, Any]:
    """Why the best plan beats the runner-up: the plan fields that differ, and each part of the
    step (compute, exposed communication per dimension, bubble, ...) as the runner-up's minus
    the best's, largest first; the parts add up to the step-time difference.
    """
    if len(plans) < 2:
        return {"reason": "only one plan fits: there is no runner-up"}
    best, second = plans[0], plans[1]
    b, s = best["estimate"], second["estimate"]
    pb, ps = _parts(b), _parts(s)
    diffs = sorted(((name, ps.get(name, 0.0) - pb.get(name, 0.0)) for name in {*pb, *ps}),
                   key=lambda kv: -abs(kv[1]))
    return {"step_time_s": {"best": b["step_time_s"], "runner_up": s["step_time_s"],
                            "difference": s["step_time_s"] - b["step_time_s"]},
            "memory_gib": {"best": b["memory"]["total_gib"], "runner_up": s["memory"]["total_gib"]},
            "memory_terms_gib": [{"term": t.removesuffix("_gib"), "best": b["memory"][t], "runner_up": s["memory"][t]}
                                 for t in MEMORY_TERMS],
            "memory_risk": {"best": best.get("memory_risk"), "runner_up": second.get("memory_risk")},
            "plan_differences": {k: {"best": best.get(k), "runner_up": second.get(k)} for k in PLAN_KEYS
                                 if best.get(k) != second.get(k)},
            "parts_s": [{"part": name, "runner_up_minus_best": d} for name, d in diffs if d != 0.0]}


def render_explain(ex: dict[str, Any]) -> None:
    """The explanation as tables."""
    out = console()
    if "reason" in ex:
        out.print(ex["reason"])
        return
    st = ex["step_time_s"]
    out.print(f"\nWhy #1 beats #2: {st['best']:.3f} s vs {st['runner_up']:.3f} s "
              f"({st['difference']:+.4f} s for #2; memory {ex['memory_gib']['best']:.1f} vs "
              f"{ex['memory_gib']['runner_up']:.1f} GiB)")
    t = table("How the plans differ", "field", "#1", "#2")
    for key, v in ex["plan_differences"].items():
        t.add_row(key, str(v["best"]), str(v["runner_up"]))
    out.print(t)
    t = table("Where #2 loses (+) or gains (-) time", "part", "#2 - #1, s")
    for row in ex["parts_s"]:
        t.add_row(row["part"], f"{row['runner_up_minus_best']:+.4f}")
    out.print(t)
    t = table("Memory by term (GiB per GPU)", "term", "#1", "#2")
    for row in ex["memory_terms_gib"]:
        t.add_row(row["term"], f"{row['best']:.2f}", f"{row['runner_up']:.2f}")
    risk = ex["memory_risk"]
    if risk["best"] and risk["runner_up"]:
        t.add_row("share of HBM", f"{100 * risk['best']['hbm_share']:.0f}% ({risk['best']['risk']})",
                  f"{100 * risk['runner_up']['hbm_share']:.0f}% ({risk['runner_up']['risk']})")
    out.print(t)
