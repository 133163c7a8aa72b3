"""``twin catalog [--server HOST:PORT]``: presets, fabrics, strategies and plugins with versions.

Without ``--server`` it lists what this installation loads; with it, what a running
server loads (the two differ when the server has other plugin packages installed).
"""

from __future__ import annotations

import argparse

from twin.commands.cmd_remote import add_client_args, client_from_args
from twin.commands.cmd_render import console, print_json, table


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``catalog`` verb."""
    p = sub.add_parser("catalog", help="list presets, fabrics, strategies and plugins (here or on a server)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--no-plugins", action="store_true", help="do not autoload third-party plugins (local only)")
    add_client_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Fetch the catalog and print it (here: the engine's plain data; no gRPC or protobuf needed)."""
    if args.server:
        with client_from_args(args) as client:
            message = client.catalog()
        from google.protobuf.json_format import MessageToDict  # installed with the client (the 'server' extra)

        catalog = MessageToDict(message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)
    else:
        from twin.engine import Engine

        catalog = Engine(autoload=False if args.no_plugins else None).catalog_document()
    if args.json:
        print_json(catalog)
        return 0
    out = console()
    out.print(f"Fabric Twin {catalog['twin_version']}")
    for title, key in (("GPUs", "gpus"), ("Systems", "systems"), ("Models", "models")):
        t = table(title, "name", "origin")
        for p in catalog[key]:
            t.add_row(p["name"], p["origin"])
        out.print(t)
    c = table("Fabrics and strategies", "role", "kind", "plugin", "summary")
    for comp in (*catalog["fabrics"], *catalog["strategies"]):
        c.add_row(comp["role"], comp["kind"], comp["plugin"], comp["summary"])
    out.print(c)
    pl = table("Plugins", "name", "package", "version")
    for plugin in catalog["plugins"]:
        pl.add_row(plugin["name"], plugin["distribution"], plugin["version"])
    out.print(pl)
    return 0
