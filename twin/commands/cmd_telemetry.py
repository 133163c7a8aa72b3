"""``twin telemetry status --server HOST:PORT``: what a running twin sees and what it ignores."""

from __future__ import annotations

import argparse

from twin.commands.cmd_remote import add_client_args, client_from_args
from twin.commands.cmd_render import console, print_json, table
from twin.core.errors import SpecError


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``telemetry`` verb."""
    p = sub.add_parser("telemetry", help="a running twin's live state: components by state, ignored metrics",
                       description="Ask a running `twin serve` (--server) how many components it tracks in each "
                                   "state and which received metrics it does not read (unknown names, unsupported "
                                   "types), per name and exporter.")
    p.add_argument("what", choices=["status"], help="status: component counts, unplaced hosts, ignored metrics")
    p.add_argument("--json", action="store_true", help="print JSON")
    add_client_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Query the server and print what it sees."""
    if not args.server:
        raise SpecError("--server", "is required: the address of a running `twin serve` (HOST:PORT)")
    with client_from_args(args) as client:
        states = client.component_states()
        rows = client.ignored_metrics()
        unplaced = client.unplaced_hosts()
    if args.json:
        print_json({"components": dict(states), "ignored_metrics": rows, "unplaced_hosts": unplaced})
        return 0
    out = console()
    out.print("components: " + (", ".join(f"{n} {s}" for s, n in sorted(states.items())) or "none yet"))
    if unplaced:
        out.print(f"hosts no registered job's placement owns ({len(unplaced)}): " + ", ".join(unplaced[:20])
                  + (" ..." if len(unplaced) > 20 else ""))
    t = table("Metrics received and not read", "metric", "exporter", "points", "why")
    for r in rows:
        t.add_row(r["name"], r["exporter"] or "?", f"{r['points']:,}", r["reason"])
    out.print(t if rows else "every metric received is read")
    return 0
