"""The web view in production (issue 34, items 4 and 6), in headless Chromium: every page at a phone's
390 px and a desktop's 1440 px has no horizontal scroll, and the Step page draws the stored history
after the server restarts.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.web.conftest import screenshot
from tests.web.harness import LiveTwin

WAIT_MS = 20_000
# Each page and what says it has drawn its data.
PAGES = {"/": "window.twinFabric && window.twinFabric.loaded >= 1",
         "/step": "window.twinStep && window.twinStep.loaded >= 1",
         "/failures": "window.twinFailures && window.twinFailures.loaded >= 1",
         "/sweeps": "typeof window.twinSweeps === 'object'"}
WIDTHS = (390, 1440)
REPORTS = 12


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveTwin]:
    # History sampled every 50 ms (the default is 15 s), so each report below is one stored sample.
    t = LiveTwin(tmp_path_factory.mktemp("web-responsive"), telemetry={"history_interval_s": 0.05}).start()
    try:
        t.sim.set_port(0, 3, "degraded")  # something to list in the problem and tier tables
        for i in range(REPORTS):
            t.sim.step_time_s = t.designed * (1.10 + 0.02 * i)  # rising: each report moves the median
            t.push(times=1)
            _wait_for_samples(t, 3 + i)  # sampled by the server on its own: nobody is looking
        yield t
    finally:
        t.stop()


def _wait_for_samples(twin: LiveTwin, reports: int, timeout_s: float = 60.0) -> None:
    """Until the twin has ``reports`` reports of the job and its stored history has caught up with them
    (the last sample's observed step is the one GetDivergence answers now).
    """
    import grpc

    from twin.rpc.v1 import telemetry_pb2 as pb
    from twin.rpc.v1 import telemetry_pb2_grpc as pbg

    deadline = time.monotonic() + timeout_s
    with grpc.insecure_channel(twin.address) as channel:
        api = pbg.TelemetryServiceStub(channel)
        while True:
            (job,) = api.GetDivergence(pb.GetDivergenceRequest(history_points=1), timeout=60).jobs
            last = job.history[-1] if job.history else None
            if job.observations >= reports and last is not None and last.HasField("observed_step_time_s") \
                    and last.observed_step_time_s == job.observed_step_time_s:
                return
            assert time.monotonic() < deadline, (reports, job)
            time.sleep(0.05)


def _page(browser: Any, url: str, width: int, ready: str) -> tuple[Any, list[str]]:
    page = browser.new_page()
    page.set_viewport_size({"width": width, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(url)
    page.wait_for_function(ready, timeout=WAIT_MS)
    page.wait_for_timeout(300)  # charts and tables laid out
    return page, errors


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("path", list(PAGES))
def test_no_page_scrolls_sideways(browser, twin, path, width):
    page, errors = _page(browser, twin.url + path, width, PAGES[path])
    try:
        scroll, inner = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        wide = page.evaluate("""() => [...document.querySelectorAll('main *')].filter(e => {
            const r = e.getBoundingClientRect(); return r.right > window.innerWidth + 0.5 && r.width > 0;
          }).slice(0, 5).map(e => e.tagName + '#' + e.id + '.' + e.className)""")
        screenshot(page, f"{path.strip('/') or 'fabric'}-{width}")
        assert scroll <= inner, (path, width, scroll, inner, wide)
        assert errors == []
    finally:
        page.close()


def test_the_headline_step_time_never_wraps(browser, twin):
    page, _ = _page(browser, twin.url + "/step", 390, PAGES["/step"])
    try:
        for figure in ("#designed-step", "#now-step", "#observed-step"):
            lines = page.evaluate(f"""() => {{ const e = document.querySelector('{figure}');
                return Math.round(e.getBoundingClientRect().height / parseFloat(getComputedStyle(e).lineHeight)); }}""")
            assert lines == 1, figure
    finally:
        page.close()


def test_the_step_page_shows_the_stored_history_after_a_restart(browser, twin):
    assert twin.stop() == 0
    twin.proc = None
    twin.start(simulate=False)  # the same state directory: the job and its history are read back
    page, errors = _page(browser, twin.url + "/step", 1440, PAGES["/step"])
    try:
        observed = page.evaluate("window.twinStep.charts.history.data.datasets"
                                 ".find(d => d.label === 'observed').data.length")
        predicted = page.evaluate("window.twinStep.charts.history.data.datasets"
                                  ".find(d => d.label === 'predicted now').data.length")
        assert observed >= 10 and predicted >= 10, (observed, predicted)
        assert errors == []
    finally:
        page.close()
