"""``twin validate FILE``: predicted vs published, per case and per family."""

from __future__ import annotations

import argparse

from twin.commands.cmd_render import console, print_json, table
from twin.engine import Engine
from twin.reference import validate_file


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``validate`` verb."""
    p = sub.add_parser("validate", help="score the twin against published reference cases",
                       description="Read a twin-reference-cases/v1 (training runs) or twin-reference-collectives/v1 "
                                   "file and print predicted vs measured with the absolute error. Exits non-zero "
                                   "only when the file is malformed.")
    p.add_argument("file", help="reference file (YAML/JSON)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--no-plugins", action="store_true", help="do not autoload third-party plugins")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Score the file and print the report."""
    engine = Engine(autoload=False if args.no_plugins else None)
    report = validate_file(engine, args.file)
    data = report.to_dict()
    if args.json:
        print_json(data)
        return 0
    out = console()
    unit = "s" if report.kind == "training" else "GB/s"
    t = table(f"{report.kind} cases", "case", f"predicted {unit}", f"measured {unit}", "error")
    for r in report.cases:
        t.add_row(r.id, f"{r.predicted:.4g}", f"{r.measured:.4g}", f"{r.error_pct:+.1f}%")
    out.print(t)
    s = data["summary"]
    f = table("Summary (absolute % error)", "family", "n", "median", "p90")
    for fam, st in s["families"].items():
        f.add_row(fam, str(st["n"]), f"{st['median_abs_error_pct']:.1f}", f"{st['p90_abs_error_pct']:.1f}")
    f.add_row("ALL", str(s["n"]), f"{s['median_abs_error_pct']:.1f}", f"{s['p90_abs_error_pct']:.1f}")
    mn = s.get("multi_node")
    if mn:
        f.add_row("multi-node", str(mn["n"]), f"{mn['median_abs_error_pct']:.1f}", f"{mn['p90_abs_error_pct']:.1f}")
    out.print(f)
    for sk in s["skipped"]:
        out.print(f"skipped {sk['id']}: {sk['reason']}")
    misses = s.get("memory_misses") or []
    if misses:
        out.print(f"memory-model misses ({len(misses)}: published plans that ran but do not fit by the twin's "
                  f"count under any setting the case leaves open; predicted with the least memory): "
                  f"{', '.join(misses)}")
    policies = s.get("fit_policies_assumed") or {}
    if policies:
        out.print(f"fitted by an assumed memory policy ({len(policies)}; each case's notes name it): "
                  f"{', '.join(policies)}")
    mem = s.get("memory")
    if mem:
        out.print(f"peak memory per GPU against the published figure ({mem['n']} runs): median "
                  f"{mem['median_abs_error_pct']:.1f}%, p90 {mem['p90_abs_error_pct']:.1f}% absolute error")
    return 0
