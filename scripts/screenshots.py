"""Screenshots of the web view's pages, made the way the browser tests make theirs.

    python scripts/screenshots.py           # .artifacts/screenshots/{fabric,fabric-node,step,failures,sweeps}.png
    python scripts/screenshots.py --readme  # also docs/img/web-fabric.png (the README's picture)

Starts ``twin serve`` (loopback, free ports, a temporary state directory) with ``twin demo``'s
simulated exporters, degrades one port and fails another as the demo does, runs a small sweep
through the page's API, and shoots each page in Debian's Chromium (tests/web/harness.py). It
stops exactly the server it started.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.web.harness import LiveTwin, fresh_dir, launch  # noqa: E402

SPEC = """name: tp-pp-on-256-h100
base: {cluster: {system: DGX-H100, num_gpus: 256}, model: llama3.1-70b, plan: {gbs: 256, precision: bf16}}
axes: [{path: plan.tp, values: [2, 4, 8]}, {path: plan.pp, values: [1, 2, 4]}]
mode: grid
objective: {metric: step_time_s, top: 5}
"""


def main() -> int:
    """Make the screenshots; print their paths."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / ".artifacts" / "screenshots"), help="folder for the PNGs")
    parser.add_argument("--readme", action="store_true", help="also write docs/img/web-fabric.png")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from playwright.sync_api import sync_playwright

    with fresh_dir("twin-shots-") as tmp, fresh_dir("twin-chromium-") as profile:
        live = LiveTwin(Path(tmp)).start()
        try:
            live.sim.set_port(0, 3, "degraded")
            live.sim.set_port(1, 5, "down")
            live.push(3)
            with sync_playwright() as pw:
                browser = launch(pw, profile, width=1500, height=950)
                page = browser.new_page()
                shots = []
                page.goto(live.url + "/")
                page.wait_for_function("window.twinFabric && window.twinFabric.loaded >= 1", timeout=30_000)
                page.evaluate("window.twinFabric.cy.getElementById('box:tier:0:0:1').emit('tap'), null")
                page.wait_for_function("window.twinFabric.cy.getElementById('box:node:1:2').length === 1")
                page.evaluate("window.twinFabric.cy.getElementById('edge:box:node:1:2').emit('tap'), null")
                time.sleep(0.3)
                shots.append(out / "fabric.png")
                page.screenshot(path=str(shots[-1]))
                page.evaluate("window.twinFabric.cy.getElementById('box:node:1:2').emit('tap'), null")
                page.wait_for_function("window.twinFabric.cy.getElementById('rail:5').length === 1")
                page.evaluate("window.twinFabric.cy.getElementById('rail:5').emit('tap'), null")
                shots.append(out / "fabric-node.png")
                page.screenshot(path=str(shots[-1]))
                for name, ready in (("step", "window.twinStep"), ("failures", "window.twinFailures")):
                    page.goto(f"{live.url}/{name}")
                    page.wait_for_function(f"{ready} && {ready}.loaded >= 1", timeout=30_000)
                    time.sleep(0.3)
                    shots.append(out / f"{name}.png")
                    page.screenshot(path=str(shots[-1]), full_page=True)
                page.goto(live.url + "/sweeps")
                page.fill("#spec", SPEC)
                page.click("#start")
                page.wait_for_selector('#current[data-state="finished"]', timeout=120_000)
                page.wait_for_function("window.twinSweeps.shown >= 1", timeout=30_000)
                shots.append(out / "sweeps.png")
                page.screenshot(path=str(shots[-1]), full_page=True)
                browser.close()
        finally:
            live.stop()
    if args.readme:
        (ROOT / "docs" / "img").mkdir(parents=True, exist_ok=True)
        shutil.copy(out / "fabric.png", ROOT / "docs" / "img" / "web-fabric.png")
        shots.append(ROOT / "docs" / "img" / "web-fabric.png")
    for path in shots:
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
