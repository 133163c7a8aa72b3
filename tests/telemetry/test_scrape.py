"""Prometheus in: the twin scrapes a dcgm-exporter / node_exporter page served on 127.0.0.1."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from twin.core.errors import SpecError
from twin.engine import Engine
from twin.telemetry.scrape import ScrapeTarget, scrape_targets
from twin.telemetry.service import TelemetryService
from twin.telemetry.telemetry_config import TelemetryConfig

# A dcgm-exporter page as it serves it (HELP/TYPE lines, its labels), plus node_exporter's
# InfiniBand collector, and a histogram no mapping reads.
PAGE = """\
# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).
# TYPE DCGM_FI_DEV_GPU_TEMP gauge
DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-8f3a",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1"} 63
DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-1c2d",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1"} 61
# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-8f3a",Hostname="node-1"} 70123
# HELP DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL Total number of NVLink flow-control CRC errors.
# TYPE DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL counter
DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL{gpu="0",UUID="GPU-8f3a",Hostname="node-1"} {crc}
# HELP node_infiniband_port_data_transmitted_bytes_total Number of data octets transmitted on all links
# TYPE node_infiniband_port_data_transmitted_bytes_total counter
node_infiniband_port_data_transmitted_bytes_total{device="mlx5_0",port="1"} {tx}
# HELP http_request_duration_seconds A histogram.
# TYPE http_request_duration_seconds histogram
http_request_duration_seconds_bucket{le="0.1"} 1
http_request_duration_seconds_bucket{le="+Inf"} 2
http_request_duration_seconds_sum 0.3
http_request_duration_seconds_count 2
"""


class Exporter:
    """A local exposition endpoint whose counters advance between scrapes."""

    def __init__(self) -> None:
        self.crc, self.tx = 0, 0
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = PAGE.replace("{crc}", str(exporter.crc)).replace("{tx}", str(exporter.tx)).encode()
                self.send_response(200 if self.path == "/metrics" else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/metrics"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def exporter():
    e = Exporter()
    yield e
    e.close()


def test_a_scraped_dcgm_and_node_exporter_page_updates_live_state(tmp_path, exporter):
    target = ScrapeTarget(exporter.url, interval_s=3600, host="node-1", job="dcgm-exporter")
    svc = TelemetryService(Engine(autoload=False), TelemetryConfig(state_dir=tmp_path, calibrate_interval_s=0))
    try:
        # Each scrape stamps its points with time.time_ns() between these brackets, so the rate
        # lies between the two bounds they give, however late a loaded machine runs either scrape.
        a0 = time.time_ns()
        svc.scraper.scrape(target)
        a1 = time.time_ns()
        exporter.crc, exporter.tx = 50, 40 * 10**9
        time.sleep(1.0)  # an interval to take a rate over, not a wait for anything
        b0 = time.time_ns()
        svc.scraper.scrape(target)
        b1 = time.time_ns()
        comps = svc.state.components
        assert comps["node-1/gpu:0"].signals["temperature_c"] == 63.0
        assert comps["node-1/gpu:1"].signals["temperature_c"] == 61.0
        port = comps["node-1/ib_port:mlx5_0/1"]
        # A rate from two scrapes: 40e9 bytes over their interval (a fixed 1 s +-30% was a guess at load).
        slowest, fastest = 40e9 / ((b1 - a0) * 1e-9), 40e9 / ((b0 - a1) * 1e-9)
        assert slowest * (1 - 1e-9) <= port.signals["tx_Bps"] <= fastest * (1 + 1e-9)  # 1e-9: float division
        nvlink = next(c for cid, c in comps.items() if cid.startswith("node-1/nvlink"))
        assert any(v > 0 for k, v in nvlink.signals.items() if k.endswith("_per_s"))  # the CRC counter rose
        ignored = {r["name"] for r in svc.ignored_metrics()}
        assert "DCGM_FI_DEV_FB_USED" in ignored  # unknown: counted, not silently dropped
    finally:
        svc.close()


def test_scraping_runs_on_its_interval_and_a_dead_target_never_stops_the_others(tmp_path, exporter):
    dead = "http://127.0.0.1:9/metrics"  # discard port: connection refused
    cfg = TelemetryConfig(state_dir=tmp_path, calibrate_interval_s=0,
                          scrape=({"url": dead, "interval_s": 0.2, "timeout_s": 1},
                                  {"url": exporter.url, "interval_s": 0.2, "host": "node-9"}))
    # dcgm-exporter's own Hostname label names the node; the target's host is the fallback.
    svc = TelemetryService(Engine(autoload=False), cfg)
    try:
        deadline = time.monotonic() + 20
        while "node-1/gpu:0" not in svc.state.components and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "node-1/gpu:0" in svc.state.components
        assert "node-9/ib_port:mlx5_0/1" in svc.state.components  # node_exporter's lines carry no host
        assert svc.scraper.stats["scrape_errors"] >= 1
    finally:
        svc.close()
    assert not svc.scraper._thread.is_alive()


def test_bad_targets_are_refused_naming_the_field():
    with pytest.raises(SpecError) as err:
        scrape_targets([{"url": "ftp://x/metrics"}])
    assert err.value.field == "telemetry.scrape[0].url"
    with pytest.raises(SpecError) as err:
        scrape_targets([{"url": "http://x/metrics", "interval_s": 0}])
    assert err.value.field == "telemetry.scrape[0].interval_s"
    with pytest.raises(SpecError) as err:
        scrape_targets([{"url": "http://x/metrics", "colour": 1}])
    assert err.value.field == "telemetry.scrape[0].colour"
