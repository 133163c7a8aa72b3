"""The service's own traces and metrics reach an OTLP endpoint configured by OTEL_* variables."""

from __future__ import annotations

import threading
import time
from concurrent import futures

import grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from twin.client import TwinClient

ONE_LINE = {"cluster": {"system": "DGX-H100", "num_gpus": 64}, "model": "llama3.1-8b", "plan": {"tp": 8, "gbs": 64}}


class Receiver(trace_service_pb2_grpc.TraceServiceServicer, metrics_service_pb2_grpc.MetricsServiceServicer):
    """A minimal OTLP/gRPC collector that keeps what it is sent."""

    def __init__(self) -> None:
        self.spans: list = []
        self.metrics: set[str] = set()
        self.lock = threading.Lock()

    def Export(self, request, context):  # both services have an Export method
        with self.lock:
            if isinstance(request, trace_service_pb2.ExportTraceServiceRequest):
                for rs in request.resource_spans:
                    for ss in rs.scope_spans:
                        self.spans.extend(ss.spans)
                return trace_service_pb2.ExportTraceServiceResponse()
            for rm in request.resource_metrics:
                for sm in rm.scope_metrics:
                    self.metrics.update(m.name for m in sm.metrics)
            return metrics_service_pb2.ExportMetricsServiceResponse()


def test_default_is_off(server):
    assert server.wait_log(lambda r: r.get("msg") == "serving")["otel"] is False


def test_traces_and_metrics_exported_over_otlp(start_server):
    receiver = Receiver()
    collector = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(receiver, collector)
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(receiver, collector)
    port = collector.add_insecure_port("127.0.0.1:0")
    collector.start()
    try:
        srv = start_server(env={
            "OTEL_TRACES_EXPORTER": "otlp", "OTEL_METRICS_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}", "OTEL_EXPORTER_OTLP_INSECURE": "true",
            "OTEL_BSP_SCHEDULE_DELAY": "200", "OTEL_METRIC_EXPORT_INTERVAL": "500"})
        assert srv.wait_log(lambda r: r.get("msg") == "serving")["otel"] is True
        with TwinClient(srv.address) as client:
            client.predict(ONE_LINE)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            with receiver.lock:
                names = {s.name for s in receiver.spans}
                if "twin.rpc.v1.TwinService/Predict" in names and "rpc.server.duration" in receiver.metrics:
                    break
            time.sleep(0.1)
        with receiver.lock:
            span = next(s for s in receiver.spans if s.name == "twin.rpc.v1.TwinService/Predict")
            attrs = {a.key: a.value for a in span.attributes}
            assert attrs["rpc.grpc.status_code"].int_value == 0
            assert {"rpc.server.duration", "twin.rpc.calls"} <= receiver.metrics
        assert srv.stop() == 0  # while the collector still listens: the final flush succeeds
    finally:
        collector.stop(0)
