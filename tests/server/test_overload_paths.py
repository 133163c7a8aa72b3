"""Health and refusals stay fast under overload on every surface (issue 39, item 9).

Found: with 196 sweep streams being refused, a Predict took 3.6-4.2 s (each refusal took one of
the server's workers to find out), and Health's p99 reached 0.56-0.78 s at 2-3x load (it waited
for the same workers). Now a stream past its limit is refused as it arrives, on the accepting
thread, Health's Check runs on a pool of its own, and ingest decodes at most two requests at
once (more wait, bounded, or are told to retry). ``benchmarks/bench_overload.py`` measures it.
"""

from __future__ import annotations

import json
import threading
import time

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_status import rpc_status

from tests.server.conftest import ServerProcess
from tests.server.fuzzcases import BASE
from twin.rpc.v1 import sweep_service_pb2 as sw
from twin.server.admission import POOL_ATTRIBUTE, AdmissionInterceptor, CountingExecutor
from twin.telemetry.ingest import DecodeSlots, Overloaded

STREAM = "/test.Streams/Open"


def test_a_stream_past_its_limit_is_refused_as_it_arrives_without_a_worker():
    executor = CountingExecutor(max_workers=1, thread_name_prefix="test-streams")
    health_pool = CountingExecutor(max_workers=1, thread_name_prefix="test-health")
    full = {"now": False}
    admission = AdmissionInterceptor(executor, max_queued=2, health_pool=health_pool,
                                     stream_limits={STREAM: lambda: "1 stream is open (the limit)" if full["now"]
                                                    else None})
    release = threading.Event()

    def stream(request: bytes, context: grpc.ServicerContext):
        yield request
        release.wait(20)

    handler = grpc.method_handlers_generic_handler("test.Streams",
                                                   {"Open": grpc.unary_stream_rpc_method_handler(stream)})
    server = grpc.server(executor, interceptors=[admission], handlers=[handler])
    health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            open_stream = ch.unary_stream(STREAM)
            held = open_stream(b"x", timeout=30)
            assert next(held) == b"x"  # the one worker is now held by this stream
            full["now"] = True
            for _ in range(50):  # refused at once, though no worker is free to refuse them
                with pytest.raises(grpc.RpcError) as err:
                    list(open_stream(b"y", timeout=5))
                assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "limits.max_sweep_streams" in err.value.details()
            status = rpc_status.from_call(err.value)
            assert status is not None and any(d.type_url.endswith("RetryInfo") for d in status.details)
            assert admission.refused_streams == 50
            # Health is answered on its own pool while the server's only worker is held.
            assert health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5).status == \
                health_pb2.HealthCheckResponse.SERVING
            release.set()
            held.cancel()
    finally:
        release.set()
        server.stop(None).wait(10)


def test_health_check_is_handed_to_the_health_pool():
    executor = CountingExecutor(max_workers=1)
    health_pool = CountingExecutor(max_workers=1)
    admission = AdmissionInterceptor(executor, max_queued=2, health_pool=health_pool)
    check = grpc.unary_unary_rpc_method_handler(lambda request, context: request)

    class Details(grpc.HandlerCallDetails):
        method = "/grpc.health.v1.Health/Check"
        invocation_metadata = ()

    handler = admission.intercept_service(lambda _details: check, Details())
    assert getattr(handler.unary_unary, POOL_ATTRIBUTE) is health_pool


def test_decode_slots_bound_who_decodes_and_who_waits():
    slots = DecodeSlots(slots=1, max_waiting=1, retry_after_s=1.0)
    inside = threading.Event()
    leave = threading.Event()

    def hold() -> None:
        with slots.hold():
            inside.set()
            leave.wait(20)

    holder = threading.Thread(target=hold)
    holder.start()
    inside.wait(10)
    waited: list[str] = []

    def wait() -> None:
        with slots.hold(time.monotonic() + 20):
            waited.append("in")

    waiter = threading.Thread(target=wait)
    waiter.start()
    deadline = time.monotonic() + 10
    while slots.waiting < 1 and time.monotonic() < deadline:  # the waiter is counted
        time.sleep(0.01)
    with pytest.raises(Overloaded, match="1 requests wait to be decoded"), slots.hold():  # past the bound: at once
        pass
    leave.set()
    holder.join(10)
    waiter.join(10)
    assert waited == ["in"] and slots.refused == 1
    with slots.hold():  # and it is free again
        pass


def test_decode_slots_give_up_at_the_requests_deadline():
    slots = DecodeSlots(slots=1, max_waiting=4, retry_after_s=2.0)
    with slots.hold(), pytest.raises(Overloaded, match="deadline") as err, slots.hold(time.monotonic() + 0.05):
        pass
    assert err.value.retry_after_s == 2.0


@pytest.mark.slow
def test_sweep_streams_past_the_limit_leave_predict_and_health_answered(tmp_path):
    """A live server with 2 workers (1 stream slot): a long sweep holds it, 100 more are refused at
    once, and Health and Predict are answered meanwhile."""
    srv = ServerProcess(tmp_path, env={"TWIN_WORKERS": "2"})
    spec = json.dumps({"name": "long", "base": BASE, "axes": [{"path": "plan.gbs",
                                                              "values": list(range(64, 64 * 20000, 64))}]})
    try:
        with grpc.insecure_channel(srv.address) as ch:
            sweep = ch.unary_stream("/twin.rpc.v1.SweepService/Sweep",
                                    request_serializer=sw.SweepRequest.SerializeToString,
                                    response_deserializer=sw.SweepEvent.FromString)
            running = sweep(sw.SweepRequest(spec_document=spec), timeout=60)
            next(running)  # started: the slot is held
            codes = []
            for _ in range(100):
                try:
                    list(sweep(sw.SweepRequest(spec_document=spec), timeout=10))
                except grpc.RpcError as err:
                    codes.append(err.code())
            assert set(codes) == {grpc.StatusCode.RESOURCE_EXHAUSTED} and len(codes) == 100
            assert health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5).status == \
                health_pb2.HealthCheckResponse.SERVING
            running.cancel()
    finally:
        assert srv.stop() == 0


def test_a_full_writer_queue_refuses_before_decoding(tmp_path, monkeypatch):
    """Past capacity the writer is the bottleneck: a request that would be refused at the queue
    is refused before its decoding (which took CPU from the writer and waited for a decoding
    slot first: OTLP/gRPC refusals took 258-686 ms at p50 at 2x load), on OTLP and remote write."""
    from twin.engine import Engine
    from twin.rpc.prompb import remote_pb2
    from twin.telemetry import remote_write
    from twin.telemetry.otlpbuild import request
    from twin.telemetry.service import TelemetryService
    from twin.telemetry.telemetry_config import TelemetryConfig

    svc = TelemetryService(Engine(autoload=False),
                           TelemetryConfig(state_dir=tmp_path, calibrate_interval_s=0, max_pending_points=1))
    release = threading.Event()
    applying = threading.Event()
    real_apply = svc._apply_batch

    def slow_apply(items):
        applying.set()
        assert release.wait(30)
        real_apply(items)

    monkeypatch.setattr(svc.queue, "_apply", slow_apply)
    decoded = []
    real_decode = svc.decoder.decode
    monkeypatch.setattr(svc.decoder, "decode", lambda *a, **k: decoded.append(1) or real_decode(*a, **k))
    t = time.time_ns()

    def one(host):
        return request({"host.name": host}, [("node_infiniband_state_id", "gauge",
                                               [({"device": "mlx5_0", "port": "1"}, 0, t, 4.0)])])

    try:
        first = threading.Thread(target=svc.ingest, args=(one("n1"), 30))
        first.start()
        assert applying.wait(30)  # the writer holds one point: the bound (1) is reached
        assert decoded == [1]
        with pytest.raises(Overloaded, match="ingest queue full"):
            svc.ingest(one("n2"), 30)
        assert decoded == [1]  # refused without being decoded
        write = remote_pb2.WriteRequest()
        ts = write.timeseries.add()
        ts.labels.add(name="__name__", value="node_infiniband_state_id")
        ts.samples.add(value=4.0, timestamp=t // 1_000_000)
        answer = remote_write.write(svc, write.SerializeToString(), 30)
        assert answer.status == 503 and answer.headers["Retry-After"] == "1" and "ingest queue full" in answer.message
        release.set()
        first.join(30)
        assert svc.ingest(one("n3"), 30) == (0, "")  # drained: taken again
    finally:
        release.set()
        svc.close()
