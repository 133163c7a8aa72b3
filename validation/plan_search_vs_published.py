"""How good are the plans publishers chose, by the twin's own reckoning?

For every training case of validation/reference/training_runs.yaml, the twin predicts
the published plan (unstated knobs such as micro-batch and interleaving chosen by the
twin, exactly as ``twin validate`` does) and then searches every valid plan of the same
model, cluster, global batch, sequence length and precision (``twin plan``'s space:
tp, pp, vp, dp, cp, ep, mbs, recompute, optimizer sharding). It reports how often the
published plan is within 5% of the twin's best, and for the others which plan the twin
prefers and where the time goes (the parts of the step that differ most).

    python validation/plan_search_vs_published.py [--json OUT.json] [--cases ID,ID] [--max-gpus N] [--headroom H]

The twin's plans must leave ``--headroom`` of HBM free, ``twin plan``'s default (10%).

This measures the twin as much as the publishers: a large gap means either a better plan
exists or the twin mis-prices something the publishers knew (read the reasons).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from twin.core.errors import TwinError
from twin.engine import Engine
from twin.reference import best_plan, training_scenario
from twin.sweep.plansearch import DEFAULT_MEMORY_HEADROOM, SHARDINGS, build_space, plan_scenario, search_plans
from twin.sweep.reduce import nrows, row_dict

HERE = Path(__file__).resolve().parent
CASES = HERE / "reference" / "training_runs.yaml"
WITHIN = 0.05
PARTS = ("compute_s", "recompute_s", "bubble_s", "optimizer_s", "offload_s", "overlap_interference_s")


def _plan_dict(scn: Any) -> dict[str, Any]:
    p = scn.plan
    sharding = p.optimizer_sharding
    if sharding == "fsdp" and not p.fsdp_reshard_after_forward:
        sharding = "fsdp-noreshard"
    return {"tp": p.tp, "pp": p.pp, "vp": p.vp, "dp": scn.dp, "cp": p.cp, "ep": p.ep, "mbs": p.mbs,
            "recompute": p.recompute, "sharding": sharding}


def _parts(est: dict[str, Any]) -> dict[str, float]:
    bd = est["breakdown"]
    out = {k.removesuffix("_s"): bd[k] for k in PARTS}
    for dim, v in bd["exposed_comm_s"].items():
        out[f"exposed {dim}"] = v
    return out


def why(published: dict[str, Any], best: dict[str, Any]) -> str:
    """The parts of the step that differ most between the published and the best plan."""
    a, b = _parts(published), _parts(best)
    deltas = sorted(((b.get(k, 0.0) - a.get(k, 0.0), k) for k in set(a) | set(b)), key=lambda d: d[0])
    saved = [f"{k} {d:+.3f} s" for d, k in deltas if d < -0.005 * published["step_time_s"]][:3]
    paid = [f"{k} {d:+.3f} s" for d, k in reversed(deltas) if d > 0.005 * published["step_time_s"]][:2]
    mem = f"memory {published['memory']['total_gib']:.0f} -> {best['memory']['total_gib']:.0f} GiB"
    return "; ".join(filter(None, [", ".join(saved), ("pays " + ", ".join(paid)) if paid else "", mem]))


def compare_case(engine: Engine, case: dict[str, Any], headroom: float = 0.0,
                 hold: tuple[str, ...] = ()) -> dict[str, Any]:
    cid = str(case.get("id"))
    scn, knobs, _ = training_scenario(engine, case)
    published, pub_time, pub_notes = best_plan(engine, scn, knobs)
    pub_est = engine.evaluate(published).to_dict()
    # same model, cluster, batch, sequence, precision and training mode; every plan degree free
    base = dataclasses.replace(published.plan, dp=None, vp=1, etp=None)
    pub = _plan_dict(published)
    options: dict[str, Any] = {}
    if "sharding" in hold:
        options["shardings"] = (pub["sharding"],) if pub["sharding"] in SHARDINGS else ("distributed_optimizer",)
    if "cp" in hold:
        options["cp_values"] = (pub["cp"],)
    if "ep" in hold:
        options["ep_values"] = (pub["ep"],)
    # the published run's software stack and calibration: the search asks which plan is best on
    # the stack the run used (an old stack's costs, e.g. gradients reduced after the backward)
    space = build_space(published.cluster, published.model, base, name=cid, software=published.software,
                        calibration=published.calibration, **options)
    res = search_plans(engine, space, top=1, memory_headroom=headroom)
    row: dict[str, Any] = {"id": cid, "family": case.get("family"), "gpus": published.cluster.num_gpus,
                           "plans_searched": res.result.done,
                           "fit": res.result.feasible + res.pruned,
                           "search_s": round(res.seconds, 2), "published_plan": _plan_dict(published),
                           "published_s": pub_time, "published_fits": pub_est["memory"]["fits"],
                           "published_leaves_headroom": pub_est["memory"]["total_gib"]
                           <= (1.0 - headroom) * pub_est["memory"]["capacity_gib"]}
    if pub_notes:
        row["notes"] = pub_notes
    if nrows(res.result.top) == 0:
        row.update(best_s=None, ratio=None, within=None, reason="no plan fits in memory by the twin's count")
        return row
    best_row = row_dict(res.result.top, 0)
    best_scn = plan_scenario(space, best_row)
    best_est = res.estimates[0]
    ratio = pub_time / best_est["step_time_s"]
    row.update(best_s=best_est["step_time_s"], ratio=ratio, within=ratio <= 1 + WITHIN,
               best_plan=_plan_dict(best_scn))
    if not row["within"]:
        row["why"] = why(pub_est, best_est)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=None, help="write every case's comparison to this file")
    ap.add_argument("--cases", default=None, help="comma-separated case ids (default: all)")
    ap.add_argument("--max-gpus", type=int, default=None, help="skip cases larger than this")
    ap.add_argument("--hold", default="",
                    help="comma-separated fields kept at the published value: sharding, cp, ep (features a "
                         "publisher may not have had)")
    ap.add_argument("--headroom", type=float, default=DEFAULT_MEMORY_HEADROOM,
                    help=f"fraction of HBM the twin's plans must leave free (default {DEFAULT_MEMORY_HEADROOM:g}, "
                         "twin plan's; 0: up to the last byte of HBM)")
    args = ap.parse_args()
    import yaml

    engine = Engine(autoload=False)
    data = yaml.safe_load(CASES.read_text(encoding="utf-8"))
    wanted = set(args.cases.split(",")) if args.cases else None
    hold = tuple(h for h in args.hold.split(",") if h)
    for h in hold:
        if h not in ("sharding", "cp", "ep"):
            ap.error(f"--hold: {h!r} is not one of sharding, cp, ep")
    rows, skipped = [], []
    t0 = time.perf_counter()
    for case in data.get("cases") or []:
        cid = str(case.get("id"))
        if wanted and cid not in wanted:
            continue
        if args.max_gpus and int((case.get("cluster") or {}).get("num_gpus") or 0) > args.max_gpus:
            continue
        try:
            row = compare_case(engine, case, args.headroom, hold)
        except TwinError as err:
            skipped.append({"id": cid, "reason": str(err)})
            print(f"skip {cid}: {err}", file=sys.stderr)
            continue
        rows.append(row)
        mark = "ok " if row.get("within") else ("-- " if row.get("within") is None else "GAP")
        ratio = f"{row['ratio']:.3f}" if row.get("ratio") else "  -  "
        print(f"{mark} {cid:48s} {row['gpus']:>6} GPUs  {row['plans_searched']:>8,} plans {row['search_s']:6.1f} s  "
              f"published/best {ratio}", file=sys.stderr)
    ranked = [r for r in rows if r.get("ratio") is not None]
    within = [r for r in ranked if r["within"]]
    gaps = sorted((r for r in ranked if not r["within"]), key=lambda r: -r["ratio"])
    summary = {
        "headroom": args.headroom, "hold": list(hold), "cases": len(rows), "compared": len(ranked), "skipped": skipped,
        "within_5pct": len(within), "share_within_5pct": len(within) / len(ranked) if ranked else None,
        "median_ratio": statistics.median(r["ratio"] for r in ranked) if ranked else None,
        "plans_searched": sum(r["plans_searched"] for r in rows), "seconds": time.perf_counter() - t0,
        # Plans that ran but do not fit by the twin's memory model (its count's own error), and those
        # that fit but leave less than the headroom free (what ran inside the band the search leaves out).
        "published_not_fitting": sum(1 for r in rows if not r["published_fits"]),
        "published_inside_headroom": sum(1 for r in rows if r["published_fits"] and not r["published_leaves_headroom"]),
    }
    print(f"\n## Published plan vs the twin's best ({summary['compared']} cases compared, "
          f"{len(skipped)} skipped; memory headroom {100 * args.headroom:.0f}%; held at the published value: "
          f"{', '.join(hold) or 'nothing'})\n")
    print(f"- within 5% of the twin's best: {summary['within_5pct']} of {summary['compared']} "
          f"({100 * (summary['share_within_5pct'] or 0):.0f}%); median published/best {summary['median_ratio']:.3f}")
    print(f"- plans searched: {summary['plans_searched']:,} in {summary['seconds']:.0f} s")
    print(f"- published plans that do not fit by the twin's memory model: {summary['published_not_fitting']}; "
          f"that fit but leave less than the headroom free: {summary['published_inside_headroom']}\n")
    families: dict[str, list[dict[str, Any]]] = {}
    for r in ranked:
        families.setdefault(str(r["family"]), []).append(r)
    print("| family | cases | within 5% | median published/best |")
    print("|---|---|---|---|")
    for fam, rs in sorted(families.items()):
        print(f"| {fam} | {len(rs)} | {sum(1 for r in rs if r['within'])} | "
              f"{statistics.median(r['ratio'] for r in rs):.3f} |")
    print("\n### Where the twin believes a better plan exists (largest gaps first)\n")
    for r in gaps:
        pp, bp = r["published_plan"], r["best_plan"]
        diff = ", ".join(f"{k} {pp[k]}->{bp[k]}" for k in pp if pp[k] != bp[k])
        print(f"- **{r['id']}** ({r['gpus']} GPUs): published {r['published_s']:.3f} s, best {r['best_s']:.3f} s "
              f"({100 * (r['ratio'] - 1):.0f}% slower); change: {diff}; why: {r['why']}")
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "cases": rows}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
