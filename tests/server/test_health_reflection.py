"""grpc.health.v1 and server reflection, as Kubernetes probes and grpcurl use them."""

from __future__ import annotations

import signal
import threading

import grpc
from google.protobuf.descriptor_pool import DescriptorPool
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def test_health_serving_for_server_and_each_service(channel):
    stub = health_pb2_grpc.HealthStub(channel)
    for service in ("", "twin.rpc.v1.TwinService", "twin.rpc.v1.SweepService"):
        assert stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status == SERVING
    try:
        stub.Check(health_pb2.HealthCheckRequest(service="no.such.Service"), timeout=5)
        raise AssertionError("unknown service should be NOT_FOUND")
    except grpc.RpcError as err:
        assert err.code() == grpc.StatusCode.NOT_FOUND


def test_reflection_lists_and_describes_services(channel):
    db = ProtoReflectionDescriptorDatabase(channel)
    services = set(db.get_services())
    assert {"twin.rpc.v1.TwinService", "twin.rpc.v1.SweepService", "grpc.health.v1.Health",
            "grpc.reflection.v1alpha.ServerReflection"} <= services
    pool = DescriptorPool(db)
    predict = pool.FindServiceByName("twin.rpc.v1.TwinService").FindMethodByName("Predict")
    assert predict.input_type.full_name == "twin.rpc.v1.PredictRequest"
    cluster = pool.FindMessageTypeByName("twin.rpc.v1.ScaleOut")
    assert "nic_gbits_per_s" in cluster.fields_by_name


def test_health_goes_not_serving_during_shutdown(start_server):
    srv = start_server("--config", "/dev/null", env={"TWIN_DRAIN_S": "2", "TWIN_GRACE_S": "2"})
    with grpc.insecure_channel(srv.address) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        watch = stub.Watch(health_pb2.HealthCheckRequest(service=""), timeout=30)
        seen: list[int] = []
        got_not_serving = threading.Event()
        got_serving = threading.Event()

        def follow() -> None:
            try:
                for reply in watch:
                    seen.append(reply.status)
                    if reply.status == SERVING:
                        got_serving.set()
                    if reply.status == NOT_SERVING:
                        got_not_serving.set()
            except grpc.RpcError:
                pass

        reader = threading.Thread(target=follow, daemon=True)
        reader.start()
        assert stub.Check(health_pb2.HealthCheckRequest(), timeout=5).status == SERVING
        assert got_serving.wait(5), seen  # the watch stream has said SERVING
        srv.proc.send_signal(signal.SIGTERM)
        srv.wait_log(lambda r: r.get("msg") == "shutting down")
        # During the drain the listener is still open and says NOT_SERVING.
        assert stub.Check(health_pb2.HealthCheckRequest(), timeout=5).status == NOT_SERVING
        assert got_not_serving.wait(5), seen
        assert seen[0] == SERVING
        watch.cancel()
    assert srv.proc.wait(30) == 0
    srv.wait_log(lambda r: r.get("msg") == "stopped")
