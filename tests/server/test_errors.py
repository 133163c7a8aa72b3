"""Every error class -> its status code, with the field named in google.rpc.BadRequest."""

from __future__ import annotations

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from twin.core.errors import InfeasibleError, NotFoundError, SpecError, TooLargeError
from twin.rpc.v1 import scenario_pb2 as s
from twin.rpc.v1 import sweep_service_pb2 as sw
from twin.rpc.v1 import twin_service_pb2 as t
from twin.wire.convert import scenario_from_mapping
from twin.wire.status_table import error_from_rpc

BASE = {"cluster": {"system": "DGX-H100", "num_gpus": 64}, "model": "llama3.1-8b", "plan": {"tp": 8, "gbs": 64}}


def details(err: grpc.RpcError) -> dict[str, object]:
    status = rpc_status.from_call(err)
    assert status is not None, "no google.rpc.Status in the trailers"
    out: dict[str, object] = {}
    for d in status.details:
        for cls in (error_details_pb2.BadRequest, error_details_pb2.ResourceInfo,
                    error_details_pb2.PreconditionFailure, error_details_pb2.QuotaFailure):
            if d.Is(cls.DESCRIPTOR):
                msg = cls()
                d.Unpack(msg)
                out[cls.__name__] = msg
    return out


def call_error(fn, request) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        result = fn(request, timeout=10)
        if hasattr(result, "__iter__") and not hasattr(result, "estimate"):
            list(result)
    return info.value


def predict(stub, mapping=None, **kw):
    return call_error(stub.Predict, t.PredictRequest(scenario=scenario_from_mapping(mapping or BASE), **kw))


def bad_field(err: grpc.RpcError) -> str:
    bad = details(err)["BadRequest"]
    assert len(bad.field_violations) == 1
    return bad.field_violations[0].field


def test_spec_error_is_invalid_argument_naming_the_field(twin_stub):
    err = predict(twin_stub, {**BASE, "plan": {"tp": 3, "gbs": 64}})
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_field(err) == "plan.tp"
    assert "must divide" in details(err)["BadRequest"].field_violations[0].description
    assert "Traceback" not in err.details()
    assert isinstance(error_from_rpc(err), SpecError) and error_from_rpc(err).field == "plan.tp"


@pytest.mark.parametrize(("scenario", "field"), [
    (s.Scenario(cluster=s.Cluster(system="DGX-H100", num_gpus=64), model=s.Model(preset="llama3.1-8b"),
                plan=s.Plan(gbs=64, precision=77)), "plan.precision"),
    (s.Scenario(cluster=s.Cluster(system="DGX-H100", num_gpus=-8), model=s.Model(preset="llama3.1-8b"),
                plan=s.Plan(gbs=64)), "cluster.num_gpus"),
    (s.Scenario(cluster=s.Cluster(system="DGX-H100", num_gpus=64, scale_out=s.ScaleOut(nic_gbits_per_s=float("nan"))),
                model=s.Model(preset="llama3.1-8b"), plan=s.Plan(gbs=64)), "cluster.scale_out.nic_gbps"),
    (s.Scenario(cluster=s.Cluster(system="DGX-H100", num_gpus=64), plan=s.Plan(gbs=64)), "model"),
    (s.Scenario(cluster=s.Cluster(system="DGX-H100", num_gpus=64), model=s.Model(preset="llama3.1-8b"),
                plan=s.Plan(gbs=0)), "plan.gbs"),
    (s.Scenario(cluster=s.Cluster(system="DGX-H100", num_gpus=64), model=s.Model(preset="llama3.1-8b"),
                plan=s.Plan(gbs=64, schedule=99)), "plan.schedule"),
    # a stated schedule's rule: DualPipe needs at least 2*pp micro-batches (64 / (1 * 16) = 4 < 8)
    (s.Scenario(cluster=s.Cluster(system="DGX-H100", num_gpus=64), model=s.Model(preset="llama3.1-8b"),
                plan=s.Plan(gbs=64, tp=1, pp=4, schedule=s.PIPELINE_SCHEDULE_DUALPIPE)), "plan.gbs"),
])
def test_wire_level_bad_values(twin_stub, scenario, field):
    err = call_error(twin_stub.Predict, t.PredictRequest(scenario=scenario))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
    assert bad_field(err) == field


def test_numeric_blow_up_of_in_bounds_values_is_invalid_argument(twin_stub):
    # Found by the fuzz test: each value is in bounds (> 0) but their product underflows to
    # 0 and the core divides by it. Bad input, said so; never INTERNAL.
    tiny = 2.2250738585072014e-308
    scenario = {**BASE, "cluster": {"system": "DGX-H100", "num_gpus": 64, "scale_out": {"achievable_fraction": tiny}},
                "calibration": {"scale_out_bandwidth": tiny}}
    err = predict(twin_stub, scenario)
    # The core's bounds now reject such values by name (physically meaningful ranges).
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_field(err) == "cluster.scale_out.achievable_fraction"


def test_unknown_preset_is_not_found(twin_stub):
    err = predict(twin_stub, {**BASE, "cluster": {"system": "DGX-Z", "num_gpus": 64}})
    assert err.code() == grpc.StatusCode.NOT_FOUND
    assert bad_field(err) == "cluster.system"
    info = details(err)["ResourceInfo"]
    assert info.resource_name == "DGX-Z" and "DGX-H100" in info.description
    back = error_from_rpc(err)
    assert isinstance(back, NotFoundError) and back.name == "DGX-Z" and "DGX-H100" in back.known


def test_a_huge_echoed_value_is_clipped_and_the_error_still_names_the_field(twin_stub):
    """A 1 MiB model name: NOT_FOUND naming `model.preset` (not RESOURCE_EXHAUSTED from trailers
    too big to send), the echoed name clipped and saying so."""
    err = predict(twin_stub, {**BASE, "model": "m" * 2**20})
    assert err.code() == grpc.StatusCode.NOT_FOUND
    assert bad_field(err) == "model.preset"
    assert len(err.details()) < 2000 and "more characters" in err.details()
    assert "more characters" in details(err)["ResourceInfo"].resource_name


def test_unknown_fabric_plugin_is_not_found(twin_stub):
    err = predict(twin_stub, {**BASE, "cluster": {"system": "DGX-H100", "num_gpus": 64,
                                                  "scale_out": {"fabric": "carrier-pigeon"}}})
    assert err.code() == grpc.StatusCode.NOT_FOUND and bad_field(err) == "cluster.scale_out.fabric"


def test_infeasible_plan_is_failed_precondition(twin_stub):
    big = {"cluster": {"system": "DGX-H100", "num_gpus": 8}, "model": "llama3.1-405b", "plan": {"tp": 8, "gbs": 8}}
    ok = twin_stub.Predict(t.PredictRequest(scenario=scenario_from_mapping(big)), timeout=10)
    assert ok.estimate.memory.fits is False  # without require_fit: an estimate with the verdict
    err = predict(twin_stub, big, require_fit=True)
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert bad_field(err) == "plan"
    assert details(err)["PreconditionFailure"].violations[0].subject == "plan"
    assert isinstance(error_from_rpc(err), InfeasibleError)


def test_a_full_offload_tier_is_named_not_hbm(twin_stub):
    # Llama 3.1 70B's activations in a CXL pool of 1 GiB a node: HBM holds the rest, the pool does not.
    pool = {"fabric": "cxl", "capacity_gib_per_node": 1, "bandwidth_GBps_per_node": 256, "latency_ns": 250,
            "devices_per_node": 4}
    scn = {"cluster": {"system": "HGX-H200", "num_gpus": 64, "memory_pool": pool}, "model": "llama3.1-70b",
           "plan": {"tp": 8, "gbs": 64, "recompute": "selective", "offload": {"activations": "cxl"}}}
    mem = twin_stub.Predict(t.PredictRequest(scenario=scenario_from_mapping(scn)), timeout=30).estimate.memory
    assert mem.fits is False and mem.total_gib <= mem.capacity_gib
    assert mem.offload_capacity_gib == pytest.approx(1 / 8) and mem.offloaded_host_gib == 0
    assert mem.host_capacity_gib == pytest.approx(2048 / 8 * 0.9)  # HGX H200: 2 TiB a node, 10% kept
    err = predict(twin_stub, scn, require_fit=True)
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert f"does not fit: {mem.offloaded_gib:.1f} GiB needed of 0.1 GiB the CXL pool" in err.details()
    assert "HBM" not in err.details()


def test_too_large_is_resource_exhausted(twin_stub, sweep_stub):
    huge = {"cluster": {"system": "DGX-H100", "num_gpus": 10**12}, "model": "llama3.1-8b",
            "plan": {"tp": 8, "gbs": 125_000_000_000}}
    err = predict(twin_stub, huge)
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and bad_field(err) == "cluster.num_gpus"
    assert details(err)["QuotaFailure"].violations[0].subject == "cluster.num_gpus"
    assert isinstance(error_from_rpc(err), TooLargeError)
    long_list = {**BASE, "cluster": {"system": "DGX-H100", "num_gpus": 64,
                                     "scale_out": {"oversubscription": [1.0] * 50_000}}}
    err = predict(twin_stub, long_list)
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert bad_field(err) == "cluster.scale_out.oversubscription"
    spec = sw.SweepSpec(base=scenario_from_mapping(BASE), axes=[
        sw.SweepAxis(path="plan.gbs", range=sw.Range(start=64, stop=64 * 1001, step=64)),
        sw.SweepAxis(path="plan.mbs", range=sw.Range(start=1, stop=1001, step=1))])
    err = call_error(sweep_stub.Sweep, sw.SweepRequest(spec=spec))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and bad_field(err) == "spec.axes"
    # One axis longer than the server's point limit is refused while parsing, before its
    # values are built: 10^12 draws would be 7 TiB (a fuzz case once made that INTERNAL).
    for axis, field in ((sw.SweepAxis(path="plan.mbs", sample=sw.Sample(n=10**12, low=1, high=8)),
                         "spec.axes[0].sample.n"),
                        (sw.SweepAxis(path="plan.gbs", range=sw.Range(start=1, stop=1e15, step=1)),
                         "spec.axes[0].range")):
        err = call_error(sweep_stub.Sweep, sw.SweepRequest(spec=sw.SweepSpec(base=scenario_from_mapping(BASE),
                                                                            axes=[axis])))
        assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and bad_field(err) == field
        assert "at most 100,000" in err.details()


def test_message_size_limit(twin_stub):
    # 65 MiB > the default 64 MiB receive limit: gRPC refuses it before any servicer runs.
    err = call_error(twin_stub.Predict, t.PredictRequest(scenario_document="#" * (65 * 1024 * 1024)))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_garbage_bytes_are_invalid_argument(channel):
    raw = channel.unary_unary("/twin.rpc.v1.TwinService/Predict")
    with pytest.raises(grpc.RpcError) as info:
        raw(b"\xff\xff\xff\xff\x0f garbage", timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_field(info.value) == "request"


def test_document_errors(twin_stub):
    err = call_error(twin_stub.Predict, t.PredictRequest(scenario_document="cluster: [unclosed"))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and bad_field(err) == "scenario_document"
    bomb = "a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\n"
    err = call_error(twin_stub.Predict, t.PredictRequest(scenario_document=bomb))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "aliases" in err.details()
    err = call_error(twin_stub.Predict, t.PredictRequest())
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and bad_field(err) == "scenario"


BROKEN_PLUGIN = '''
"""A plugin whose collective-cost hook fails: the server must answer INTERNAL, generically."""
from twin.hookimpl import hookimpl


@hookimpl
def twin_collective_cost(op, size_bytes, span, hierarchy, algorithm, scenario):
    raise KeyError("secret internals 0xdeadbeef")
'''


def test_unexpected_error_is_internal_with_generic_message(start_server, tmp_path):
    # A real broken third-party plugin, discovered through its entry point like any other.
    site = tmp_path / "site"
    dist = site / "broken_twin_plugin-0.1.dist-info"
    dist.mkdir(parents=True)
    (site / "broken_twin_plugin.py").write_text(BROKEN_PLUGIN)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-twin-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[twin]\nbroken = broken_twin_plugin\n")
    srv = start_server(env={"PYTHONPATH": str(site)}, autoload=True)
    with grpc.insecure_channel(srv.address) as ch:
        from twin.rpc.v1 import twin_service_pb2_grpc

        stub = twin_service_pb2_grpc.TwinServiceStub(ch)
        err = call_error(stub.Predict, t.PredictRequest(scenario=scenario_from_mapping(BASE)))
        assert err.code() == grpc.StatusCode.INTERNAL
        assert "secret" not in err.details() and "Traceback" not in err.details()
        assert "incident" in err.details()
        incident = err.details().split("incident ")[1].split(")")[0]
        # The traceback is in the server's log, under the same incident id.
        rec = srv.wait_log(lambda r: r.get("incident") == incident)
        assert "KeyError" in rec["exc"] and "secret internals" in rec["exc"]
        # And the server still answers.
        ok = stub.GetCatalog(t.GetCatalogRequest(), timeout=10)
        assert "broken" in {p.name for p in ok.catalog.plugins}


def test_listening_beyond_loopback_unprotected_is_warned_about():
    """Checked without binding anything but loopback (tests use 127.0.0.1 only)."""
    from twin.server.grpc_app import exposure_warning
    from twin.server.server_config import ServerConfig, TlsConfig

    assert exposure_warning(ServerConfig(host="127.0.0.1"), None) is None
    assert exposure_warning(ServerConfig(host="::1"), None) is None
    msg = exposure_warning(ServerConfig(host="0.0.0.0"), None)
    assert msg and "all interfaces" in msg and "no auth token" in msg and "no TLS" in msg
    only_tls = exposure_warning(ServerConfig(host="10.0.0.5"), "secret")
    assert only_tls and "10.0.0.5" in only_tls and "no TLS" in only_tls and "token" not in only_tls.split(":")[0]
    tls = TlsConfig(cert_file="c", key_file="k")
    assert exposure_warning(ServerConfig(host="0.0.0.0", tls=tls), "secret") is None


@pytest.mark.parametrize("method", ["/grpc.health.v1.Health/Check", "/twin.rpc.v1.TelemetryService/GetLiveState",
                                    "/twin.rpc.v1.TelemetryService/RegisterJob",
                                    "/twin.rpc.v1.TelemetryService/GetDivergence"])
def test_garbage_bytes_to_health_and_telemetry_are_invalid_argument(channel, method):
    """Issue 15, hole 6: gRPC's own decoder failure is INTERNAL; every service decodes safely."""
    raw = channel.unary_unary(method)
    with pytest.raises(grpc.RpcError) as info:
        raw(b"\xff\xff\xff\xff\x0f garbage", timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_field(info.value) == "request"


def test_health_still_checks_and_watches(channel):
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    stub = health_pb2_grpc.HealthStub(channel)
    serving = health_pb2.HealthCheckResponse.SERVING
    assert stub.Check(health_pb2.HealthCheckRequest(), timeout=5).status == serving
    watch = stub.Watch(health_pb2.HealthCheckRequest(), timeout=5)
    assert next(watch).status == serving
    watch.cancel()
