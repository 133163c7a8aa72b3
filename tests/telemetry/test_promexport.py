"""The twin's answers as Prometheus metrics, and dashboards that query only what it exports."""

from __future__ import annotations

import json
import re
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from twin.engine import Engine
from twin.telemetry.otlpbuild import request
from twin.telemetry.promexport import FAMILIES, RESERVED_LABELS
from twin.telemetry.service import TelemetryService
from twin.telemetry.telemetry_config import TelemetryConfig

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = sorted((ROOT / "deploy" / "grafana").glob("*.json"))


def _scrape(tmp_path) -> tuple[str, set[str]]:
    svc = TelemetryService(Engine(autoload=False), TelemetryConfig(state_dir=tmp_path, calibrate_interval_s=0,
                                                                   metrics_address="127.0.0.1:0"))
    try:
        designed = svc.register_job("gpt", (ROOT / "examples" / "gpt3-175b-dgx-h100-ib.yaml").read_text())
        t = time.time_ns()
        svc.ingest(request({"service.name": "dcgm-exporter", "host.name": "node-1"}, [
            ("twin.training.step_time", "gauge", [({"job": "gpt"}, 0, t, designed * 1.1)]),
            ("node_infiniband_state_id", "gauge", [({"device": "mlx5_0", "port": "1"}, 0, t, 1.0)]),
            ("DCGM_FI_DEV_FB_USED", "gauge", [({"gpu": "0"}, 0, t, 1.0)])]))
        assert svc.metrics_endpoint is not None
        with urllib.request.urlopen(f"http://{svc.metrics_endpoint.address}/metrics", timeout=10) as resp:
            text = resp.read().decode()
        samples = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
        return text, samples
    finally:
        svc.close()


def test_metrics_parse_and_carry_predictions_state_and_what_is_ignored(tmp_path):
    text, samples = _scrape(tmp_path)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    steps = {s.labels["basis"]: s.value for s in families["twin_job_step_seconds"].samples}
    assert steps["now"] > steps["designed"] > 0  # a downed port makes "now" slower
    div = {s.labels["basis"]: s.value for s in families["twin_job_divergence_ratio"].samples}
    assert abs(div["designed"] - 0.1) < 1e-9
    comps = {(s.labels["kind"], s.labels["state"]): s.value for s in families["twin_components"].samples}
    assert comps[("ib_port", "down")] == 1
    down = [s for s in families["twin_component_capacity_ratio"].samples if s.labels["kind"] == "ib_port"]
    assert down and down[0].value == 0.0
    ignored = [s for s in families["twin_ignored_metric_points"].samples if s.name.endswith("_total")]
    assert ignored[0].labels == {"metric": "DCGM_FI_DEV_FB_USED", "exporter": "dcgm-exporter"}
    for name in FAMILIES:
        assert name in samples, name


def test_no_label_clashes_with_prometheus_target_labels(tmp_path):
    """A scraped ``job`` or ``instance`` is renamed ``exported_*`` by Prometheus: the job is ``training_job``."""
    text, _ = _scrape(tmp_path)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    labels = {k for f in families.values() for s in f.samples for k in s.labels}
    assert not labels & set(RESERVED_LABELS), labels
    steps = {s.labels["basis"]: s.labels["training_job"] for s in families["twin_job_step_seconds"].samples}
    assert steps == {"designed": "gpt", "now": "gpt"}
    assert [s.labels["training_job"] for s in families["twin_job_observed_step_seconds"].samples] == ["gpt"]


def test_dashboards_query_only_metrics_the_twin_exports(tmp_path):
    _, samples = _scrape(tmp_path)
    assert DASHBOARDS
    for path in DASHBOARDS:
        board = json.loads(path.read_text())
        exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
        assert exprs, path
        for expr in exprs:
            for name in re.findall(r"\btwin_[a-z_]+", expr):
                assert name in samples, f"{path.name}: {name} is not exported"
