"""The web view in a real headless Chromium, with `twin demo`'s simulated exporters pushing OTLP.

One server and one browser for the module; the tests run in order on the same cluster:
a port degrades (the Step page's "now" moves), then another fails (it turns red on the Fabric
page), then a sweep runs from the Sweeps page.
"""

from __future__ import annotations

import re

from tests.web.conftest import screenshot
from tests.web.harness import STREAM_WAIT_S, hold_event_streams

RED = "rgb(214,39,40)"  # --down in twin.css and COLOURS.down in fabric.js (#d62728)
WAIT_MS = 10_000  # "within a few seconds": telemetry -> event stream (0.5 s polls) -> page
STREAM_WAIT_MS = int(STREAM_WAIT_S * 1000)


def open_page(browser, live, path, ready):
    page = browser.new_page()
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(live.url + path)
    page.wait_for_function(ready, timeout=WAIT_MS)
    return page, errors


def test_step_page_now_changes_when_a_port_degrades(browser, live):
    page, errors = open_page(browser, live, "/step", "window.twinStep && window.twinStep.loaded >= 1")
    before = page.inner_text("#now-step")
    assert re.fullmatch(r"\d+\.\d+ s", before), before
    live.sim.set_port(0, 3, "degraded")  # node-1 mlx5_3 trains down to half rate
    live.push()
    page.wait_for_function(f"document.getElementById('now-step').textContent !== {before!r}", timeout=WAIT_MS)
    after = page.inner_text("#now-step")
    assert float(after.split()[0]) > float(before.split()[0])  # half a rail's bandwidth: slower
    assert page.inner_text("#slowdown").startswith("+")
    assert page.evaluate("window.twinStep.charts.parts.data.datasets.length") > 0
    screenshot(page, "step")
    assert errors == []
    page.close()


def test_fabric_page_a_link_that_goes_down_turns_red(browser, live):
    page, errors = open_page(browser, live, "/", "window.twinFabric && window.twinFabric.loaded >= 1")
    port = "node-2/ib_port:mlx5_5/1"
    assert page.locator(f'#problems li[data-id="{port}"]').count() == 0
    # The leaf group holding both nodes has telemetry (amber while the port the test before
    # degraded stays degraded), and nothing in it is down yet.
    box = page.evaluate("window.twinFabric.cy.nodes('[kind = \"group\"]').filter(n => n.data('state') !== 'nodata')"
                        ".map(n => n.id())")
    assert len(box) == 1, box
    assert page.evaluate(f"window.twinFabric.cy.getElementById({box[0]!r}).data('state')") in ("up", "degraded")

    live.sim.set_port(1, 5, "down")  # node-2 mlx5_5 fails
    live.push()
    item = page.locator(f'#problems li[data-id="{port}"].state-down')
    item.wait_for(timeout=WAIT_MS)
    assert item.evaluate("e => getComputedStyle(e).color").replace(" ", "") == RED
    cy = "window.twinFabric.cy"
    page.wait_for_function(f"{cy}.getElementById({box[0]!r}).data('state') === 'down'", timeout=WAIT_MS)
    assert page.evaluate(f"{cy}.getElementById({box[0]!r}).style('background-color')").replace(" ", "") == RED
    assert page.evaluate(f"{cy}.getElementById('edge:' + {box[0]!r}).style('line-color')").replace(" ", "") == RED
    screenshot(page, "fabric")

    # Drill down: the leaf group's nodes, then node-2 itself, where rail 5's link is red.
    page.evaluate(f"{cy}.getElementById({box[0]!r}).emit('tap'), null")
    page.wait_for_function(f"{cy}.getElementById('edge:box:node:1:2').length === 1", timeout=WAIT_MS)
    assert page.evaluate(f"{cy}.getElementById('edge:box:node:1:2').style('line-color')").replace(" ", "") == RED
    assert page.evaluate(f"{cy}.getElementById('box:node:1:2').data('label')") == "node-2\nnode 1"
    page.evaluate(f"{cy}.getElementById('box:node:1:2').emit('tap'), null")
    page.wait_for_function(f"{cy}.getElementById('rail:5').length === 1", timeout=WAIT_MS)
    assert page.evaluate(f"{cy}.getElementById('rail:5').data('state')") == "down"
    assert page.evaluate(f"{cy}.getElementById('rail:5').style('line-color')").replace(" ", "") == RED
    assert page.evaluate(f"{cy}.getElementById('rail:4').data('state')") != "down"
    page.evaluate(f"{cy}.getElementById('rail:5').emit('tap'), null")  # its evidence
    assert "logical port state not ACTIVE" in page.inner_text("#evidence")
    screenshot(page, "fabric-node")
    assert errors == []
    page.close()


def test_failures_page_shows_the_ranking_and_effective_training_time(browser, live):
    page, errors = open_page(browser, live, "/failures", "window.twinFailures && window.twinFailures.loaded >= 1")
    assert re.fullmatch(r"\d+(\.\d+)? %", page.inner_text("#ett"))
    assert page.locator("#ranking tbody tr").count() > 3
    assert page.locator("#redundancy tbody tr").count() > 0
    screenshot(page, "failures")
    assert errors == []
    page.close()


SPEC = """name: page-sweep
base: {cluster: {system: DGX-H100, num_gpus: 256}, model: llama3.1-70b, plan: {gbs: 256, precision: bf16}}
axes: [{path: plan.tp, values: [2, 4, 8]}, {path: plan.pp, values: [1, 2]}]
mode: grid
objective: {metric: step_time_s, top: 3}
"""


def test_a_sweep_started_from_the_page_finishes_and_its_plots_render(browser, live):
    page, errors = open_page(browser, live, "/sweeps", "typeof window.twinSweeps === 'object'")
    page.fill("#spec", SPEC)
    page.click("#start")
    page.wait_for_selector('#current[data-state="finished"]', timeout=60_000)
    page.wait_for_function("window.twinSweeps.shown >= 1", timeout=WAIT_MS)
    assert page.inner_text("#current").startswith("page-sweep")
    # Every feasible point once in a series of its own group; the front is drawn over them as a line.
    points = page.evaluate("window.twinSweeps.charts.pareto.data.datasets.filter(d => d.label !== 'Pareto front')"
                           ".reduce((n, d) => n + d.data.length, 0)")
    feasible = page.evaluate("window.twinSweeps.data.table.filter(r => r.feasible).length")
    assert points == feasible > 0
    # The plot is drawn: the Pareto canvas has painted pixels, not only its background.
    painted = page.evaluate("""() => { const c = document.getElementById('pareto');
        const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let n = 0; for (let i = 3; i < px.length; i += 4) if (px[i] > 0) n++; return n; }""")
    assert painted > 1000
    assert page.evaluate("window.twinSweeps.charts.breakdown.data.datasets.length") > 0
    assert page.locator("#table tbody tr").count() == 6
    # Sorted by the objective (step time, fastest first); a click on its column turns the order round.
    steps = "window.twinSweeps.data.table.filter(r => r.feasible).map(r => r.step_time_s)"
    assert page.evaluate("window.twinSweeps.data.sort") == "step_time_s"
    assert page.evaluate(steps) == sorted(page.evaluate(steps))
    page.click('#table th[data-key="step_time_s"]')
    page.wait_for_function("window.twinSweeps.data.order === 'desc'", timeout=WAIT_MS)
    assert page.locator('#table th[data-key="step_time_s"].sorted-desc').count() == 1
    assert page.evaluate(steps) == sorted(page.evaluate(steps), reverse=True)
    assert len(page.evaluate(steps)) == feasible
    screenshot(page, "sweeps")
    assert errors == []
    page.close()


def test_pages_load_nothing_from_outside_the_twin(browser, live):
    page = browser.new_page()
    urls: list[str] = []
    page.on("request", lambda req: urls.append(req.url))
    for path in ("/", "/step", "/failures", "/sweeps"):
        page.goto(live.url + path)
        page.wait_for_load_state("networkidle", timeout=WAIT_MS) if path != "/" else page.wait_for_timeout(500)
    assert urls
    outside = [u for u in urls if not u.startswith(live.url + "/") and not u.startswith("data:")]
    assert outside == []
    page.close()


def test_a_page_refused_an_event_stream_connects_once_there_is_room(browser, live):
    """Past the server's stream limit the page's EventSource gets 429, which browsers never
    retry by themselves: the page opens a new stream after the Retry-After and goes live."""
    from twin.web.web_app import MAX_EVENT_STREAMS

    held = hold_event_streams(live, MAX_EVENT_STREAMS)
    try:
        page = browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        with page.expect_response(lambda r: r.url == live.url + "/events", timeout=STREAM_WAIT_MS) as first:
            page.goto(live.url + "/failures")
        assert first.value.status == 429
        assert not page.evaluate("document.getElementById('live-dot').classList.contains('on')")
    finally:
        for conn in held:
            conn.close()
    # Retry-After (5 s), then the server's next poll notices the closed streams: generous for a loaded machine.
    page.wait_for_function("document.getElementById('live-dot').classList.contains('on')", timeout=STREAM_WAIT_MS)
    assert not errors, errors
    page.close()

