"""The web view on a 16,384-GPU scenario: page load time and DOM size in headless Chromium.

    python benchmarks/bench_web.py [--scenario examples/llama3-405b-16k-roce.yaml] [--nodes 8] [--repeat 3]

Starts ``twin serve`` (loopback, free ports, temporary state) with the scenario registered as
the job and ``twin demo``'s simulated exporters on ``--nodes`` nodes (one port failed), opens
each page and three Fabric views (the cluster, one pod, one node) in Debian's Chromium, and
prints per view: the time from navigation to the page's data drawn (median of ``--repeat``),
the DOM element count, the graph's elements and the JSON's size. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.web.harness import LiveTwin, fresh_dir, launch  # noqa: E402

READY = {"fabric": "window.twinFabric && window.twinFabric.loaded >= 1",
         "step": "window.twinStep && window.twinStep.loaded >= 1",
         "failures": "window.twinFailures && window.twinFailures.loaded >= 1",
         "sweeps": "typeof window.twinSweeps === 'object'"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", default=str(ROOT / "examples" / "llama3-405b-16k-roce.yaml"))
    parser.add_argument("--nodes", type=int, default=8, help="simulated nodes pushing telemetry")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with fresh_dir("twin-bench-web-") as tmp, fresh_dir("twin-chromium-") as profile:
        live = LiveTwin(Path(tmp), scenario=Path(args.scenario)).start(nodes=args.nodes)
        try:
            live.sim.set_port(1, 5, "down")
            live.push(3)
            _, root, _ = live.get("/api/fabric")
            top = json.loads(root)["view"]
            pod = next(e["data"]["at"] for e in top["elements"] if e["data"].get("at"))
            views = [("fabric: cluster", "/", "fabric"), (f"fabric: {pod}", f"/?at={pod}", "fabric"),
                     ("fabric: node:1", "/?at=node:1", "fabric"), ("step", "/step", "step"),
                     ("failures", "/failures", "failures"), ("sweeps", "/sweeps", "sweeps")]
            print(f"scenario {Path(args.scenario).name}: {json.loads(root)['summary']['num_gpus']:,} GPUs, "
                  f"{json.loads(root)['summary']['nodes']:,} nodes; telemetry from {args.nodes} nodes")
            head = ("view", "load ms (median)", "DOM elements", "graph elements", "JSON bytes")
            print(f"{head[0]:28} {head[1]:>17} {head[2]:>13} {head[3]:>15} {head[4]:>11}")
            with sync_playwright() as pw:
                browser = launch(pw, profile)
                page = browser.new_page()
                for label, path, kind in views:
                    times, dom, graph = [], 0, 0
                    for _ in range(args.repeat):
                        t0 = time.perf_counter()
                        page.goto(live.url + path)
                        page.wait_for_function(READY[kind], timeout=120_000)
                        times.append((time.perf_counter() - t0) * 1e3)
                        dom = page.evaluate("document.getElementsByTagName('*').length")
                        graph = page.evaluate("window.twinFabric ? window.twinFabric.cy.elements().length : 0")
                    api = {"fabric": "/api/fabric" + (path[1:] if path != "/" else ""), "step": "/api/step",
                           "failures": "/api/failures", "sweeps": "/api/sweeps"}[kind]
                    size = len(live.get(api)[1])
                    print(f"{label:28} {statistics.median(times):17.0f} {dom:13,} {graph:15,} {size:11,}")
                browser.close()
        finally:
            live.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
