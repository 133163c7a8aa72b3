"""``twin plugins``: what is loaded, from which package, and what each provides."""

from __future__ import annotations

import argparse
import dataclasses

from twin.commands.cmd_render import console, print_json, table
from twin.engine import Engine


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``plugins`` verb."""
    p = sub.add_parser("plugins", help="list loaded plugins, fabrics, strategies, accelerators and systems")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--no-plugins", action="store_true", help="do not autoload third-party plugins")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the plugin inventory."""
    engine = Engine(autoload=False if args.no_plugins else None)
    infos = engine.plugins()
    comps = engine.components()
    if args.json:
        print_json({"plugins": [dataclasses.asdict(i) for i in infos], "components": comps,
                    "presets": {k: engine.catalog.names(k) for k in ("gpus", "systems", "models", "software")}})
        return 0
    out = console()
    t = table("Plugins", "name", "module", "package", "version")
    for i in infos:
        t.add_row(i.name, i.module, i.distribution, i.version)
    out.print(t)
    c = table("Components", "role", "kind", "plugin", "dimension")
    for role, rows in comps.items():
        for row in rows:
            dim = row.get("dimension", "")
            c.add_row(role, row["kind"], row["plugin"], f"{dim} (alternative: select it)" if row.get("alternative")
                      else dim)
    out.print(c)
    a = table("Accelerators", "name", "generation", "dense TFLOP/s (16-bit)", "HBM", "plugin")
    for name, body, origin in engine.catalog.describe("gpus"):
        peaks = body.get("peak_tflops", {})
        half = peaks.get("bf16", peaks.get("fp16"))
        a.add_row(name, str(body.get("generation", "")), f"{half:g}" if half else "",
                  f"{body.get('hbm_gib', 0):g} GiB, {body.get('hbm_TBps', 0):g} TB/s", origin)
    out.print(a)
    s = table("Systems", "name", "accelerator", "scale-up", "scale-out", "plugin")
    for name, body, origin in engine.catalog.describe("systems"):
        so = body.get("scale_out")
        s.add_row(name, str(body.get("gpu", "")), str((body.get("scale_up") or {}).get("fabric", "nvlink")),
                  str(so.get("fabric", "")) if isinstance(so, dict) else "none", origin)
    out.print(s)
    return 0
