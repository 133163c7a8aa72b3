"""``twin fleet FILE``: several jobs on one fabric, each alone and under the others."""

from __future__ import annotations

import argparse

from twin.commands.cmd_render import console, print_json, table
from twin.engine import Engine
from twin.fleet_report import evaluate_fleet


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``fleet`` verb."""
    p = sub.add_parser("fleet", help="several jobs on one fabric: each step alone and under the others",
                       description="Read a fleet file (the shared cluster and its jobs) and print each job's step on "
                                   "its own share of the links, alone on the fabric and under the other jobs' "
                                   "traffic, with the links they contend on.")
    p.add_argument("file", help="fleet file (YAML/JSON)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--no-plugins", action="store_true", help="do not autoload third-party plugins")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Evaluate the fleet and print it."""
    report = evaluate_fleet(Engine(autoload=False if args.no_plugins else None), args.file)
    if args.json:
        print_json(report.to_dict())
        return 0
    out = console()
    t = table(f"Fleet {report.name}", "job", "placement", "own share s", "alone s", "shared s", "slowdown")
    for j in report.jobs:
        t.add_row(j.name, j.placement.describe(), f"{j.own_share.step_time_s:.4f}",
                  f"{j.alone.step_time_s:.4f}", f"{j.shared.step_time_s:.4f}", f"x{j.slowdown:.3f}")
    out.print(t)
    c = table("Links the jobs share", "job", "links", "busy", "shared with", "capacity alone -> shared")
    for j in report.jobs:
        for link in j.contended:
            others = ", ".join(f"{k} {100 * v:.0f}%" for k, v in sorted(link["shared_with"].items()))
            c.add_row(j.name, link["links"], f"{100 * link['busy']:.0f}%", others,
                      f"x{link['capacity_alone']:.2f} -> x{link['capacity_shared']:.2f}")
    out.print(c if c.row_count else "no link is loaded by two jobs: they do not contend")
    for note in report.notes:
        out.print(f"note: {note}")
    return 0
