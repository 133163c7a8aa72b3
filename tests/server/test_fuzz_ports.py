"""Every method on every port under seeded hostile input (issues 15 and 39): never INTERNAL,
UNKNOWN, a 5xx or a dead server, memory bounded, sent from 12 threads at once (the mixed
concurrent load that crashed the server in issue 39). ``benchmarks/fuzz_server.py`` runs the
same cases at 10^6 requests."""

from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.server import fuzzcases as fz
from tests.server.conftest import ServerProcess
from twin.rpc.v1 import twin_service_pb2
from twin.rpc.v1 import twin_service_pb2_grpc as twin_grpc
from twin.wire.convert import scenario_from_mapping

TOKEN = "fuzz-token-for-the-test"
CASES = 3000
SEED = 15
THREADS = 12  # the reproduction ran 12 threads of mixed traffic


@pytest.fixture(scope="module")
def every_port(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fuzz-ports")
    srv = ServerProcess(tmp, "--config", str(fz.all_ports_config(tmp)), env={fz.TOKEN_ENV: TOKEN})
    serving = srv.wait_log(lambda r: r.get("msg") == "serving")
    yield srv, fz.listeners_of(serving)
    assert srv.stop() == 0, srv.text()[-3000:]


def test_the_server_lists_every_port_it_opened(every_port):
    _srv, listeners = every_port
    # web: the web view (twin.web), fuzzed with hostile requests to its routes (fuzzcases.web_case).
    assert set(listeners) == {"main", "health", "otlp_grpc", "otlp_http", "metrics", "web"}
    assert all(address.startswith("127.0.0.1:") for address in listeners.values())


@pytest.mark.slow
def test_seeded_hostile_requests_on_every_method_and_port(every_port):
    srv, listeners = every_port
    report = fz.run(listeners, TOKEN, CASES, SEED, pid=srv.proc.pid, threads=THREADS,
                    alive=lambda: srv.proc.poll() is None)
    assert report.sent == CASES
    assert not report.failures, "\n".join(report.failures[:20])
    # Every method of every port was reached, and most got past decoding to a real answer.
    assert set(report.by_target) == {f"{port} {m.path if m else 'http'}" for port, _, m in fz.targets(listeners)}
    answered = {k.rsplit(" -> ", 1)[0] for k, n in report.outcomes.items() if k.endswith(("-> OK", "-> 200"))}
    for port, method in [("main", "/twin.rpc.v1.TwinService/Predict"), ("main", "/twin.rpc.v1.SweepService/Sweep"),
                         ("main", "/twin.rpc.v1.FailureService/EvaluateFailures"),
                         ("otlp_grpc", "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export"),
                         ("health", "/grpc.health.v1.Health/Check"), ("otlp_http", "http"), ("metrics", "http"),
                         ("web", "http")]:
        assert f"{port} {method}" in answered, sorted(answered)
    # Memory: bounded caches, nothing kept per request (the 100k run shows the plateau).
    assert max(report.rss_mib) < report.rss_mib[0] + 150, report.rss_mib
    errors = [r for r in srv.records if str(r.get("level", "")).lower() in ("error", "critical")]
    assert not errors, errors[:3]
    with grpc.insecure_channel(listeners["main"]) as ch:
        meta = (("authorization", f"Bearer {TOKEN}"),)
        assert health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5).status == \
            health_pb2.HealthCheckResponse.SERVING
        est = twin_grpc.TwinServiceStub(ch).Predict(
            twin_service_pb2.PredictRequest(scenario=scenario_from_mapping(fz.BASE)), metadata=meta, timeout=10)
        assert est.estimate.step_time_s > 0
    assert srv.proc.poll() is None


@pytest.mark.parametrize("path", ["/grpc.health.v1.Health/Watch",
                                  "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"])
def test_garbage_to_health_watch_and_reflection_is_invalid_argument(every_port, path):
    """Found by this fuzzer: both answered INTERNAL "Exception deserializing request!"."""
    _srv, listeners = every_port
    with grpc.insecure_channel(listeners["main"]) as ch, pytest.raises(grpc.RpcError) as err:
        list(ch.unary_stream(path)(b"\xff\xff\xff\xff", timeout=5))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "request" in err.value.details()
