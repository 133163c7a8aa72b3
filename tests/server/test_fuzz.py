"""Hostile input never kills the server: hypothesis over the request messages, live server.

Four streams of cases (about 3,400 in all): garbage bytes on every method, whole request
messages built field by field from the descriptors with hostile values (NaN, inf,
negative, zero, 2^63-1, 10^12 GPUs, unknown enum numbers, random strings), a valid
scenario with a few fields replaced by hostile values (reaching deep into the model), and
sweep requests. Every answer must be OK or a domain error code; never INTERNAL, UNKNOWN
or a dead server. Afterwards Health still says SERVING and a normal Predict still works.
"""

from __future__ import annotations

import math

import grpc
import pytest
from google.protobuf import struct_pb2
from google.protobuf.descriptor import FieldDescriptor
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from twin.rpc.v1 import scenario_pb2, sweep_service_pb2, twin_service_pb2
from twin.rpc.v1 import sweep_service_pb2_grpc as sweep_grpc
from twin.rpc.v1 import twin_service_pb2_grpc as twin_grpc
from twin.wire.convert import scenario_from_mapping

pytestmark = pytest.mark.slow

ALLOWED = {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
           grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.RESOURCE_EXHAUSTED}
METHODS = ("/twin.rpc.v1.TwinService/Predict", "/twin.rpc.v1.TwinService/Validate",
           "/twin.rpc.v1.TwinService/GetCatalog")
BASE = {"cluster": {"system": "DGX-H100", "num_gpus": 64}, "model": "llama3.1-8b", "plan": {"tp": 8, "gbs": 64}}
FUZZ = dict(deadline=None, database=None, suppress_health_check=list(HealthCheck))
COUNT = {"cases": 0}

INTS = st.one_of(st.sampled_from([0, -1, 1, 2, 3, 7, 8, 64, 10**12, 2**63 - 1, -(2**63), 2**31]),
                 st.integers(-10, 10**6))
FLOATS = st.one_of(st.sampled_from([0.0, -0.0, -1.0, 1e-300, 1e300, math.inf, -math.inf, math.nan, 2.0**63]),
                   st.floats(allow_nan=True, allow_infinity=True))
NAMES = st.sampled_from(["DGX-H100", "GB200-NVL72", "llama3.1-8b", "deepseek-v3", "H100-SXM-80GB", "hopper",
                         "nvlink", "infiniband", "roce", "cxl", "cpo", "", "\x00", "é" * 3, "x" * 300])
STRINGS = st.one_of(NAMES, st.text(max_size=16))
STRUCT_VALUES = st.one_of(st.none(), st.booleans(), FLOATS.filter(math.isfinite), STRINGS)


@pytest.fixture(scope="module")
def fuzz_server(start_server_module):
    # Small sweep limit: any fuzzed sweep stays quick.
    srv = start_server_module(env={"TWIN_LIMITS_MAX_SWEEP_POINTS": "40"})
    SERVERS.append(srv)
    return srv


@pytest.fixture(scope="module")
def start_server_module(tmp_path_factory):
    from tests.server.conftest import ServerProcess

    started = []

    def start(env=None):
        srv = ServerProcess(tmp_path_factory.mktemp("fuzz"), env=env)
        started.append(srv)
        return srv

    yield start
    for srv in started:
        assert srv.stop() == 0, srv.text()


@pytest.fixture(scope="module")
def fuzz_channel(fuzz_server):
    with grpc.insecure_channel(fuzz_server.address) as ch:
        grpc.channel_ready_future(ch).result(timeout=10)
        yield ch


SERVERS: list = []


def check(fn) -> None:
    COUNT["cases"] += 1
    try:
        result = fn()
        if hasattr(result, "__next__"):
            for _ in result:
                pass
    except grpc.RpcError as err:
        if err.code() not in ALLOWED:  # show the server's side of it
            incident = (err.details() or "").partition("incident ")[2].partition(")")[0]
            logged = [r.get("exc", "") for srv in SERVERS for r in srv.records if r.get("incident") == incident]
            raise AssertionError(f"{err.code()}: {err.details()}\n{''.join(logged)}") from None
        assert "Traceback" not in (err.details() or "")


# ----------------------------------------------------------- descriptor strategies
def scalar(fd: FieldDescriptor) -> st.SearchStrategy:
    if fd.enum_type is not None:
        return st.one_of(st.sampled_from([v.number for v in fd.enum_type.values]), st.integers(-3, 40),
                         st.just(2**31 - 1))
    return {FieldDescriptor.TYPE_INT64: INTS, FieldDescriptor.TYPE_DOUBLE: FLOATS,
            FieldDescriptor.TYPE_BOOL: st.booleans(), FieldDescriptor.TYPE_STRING: STRINGS}[fd.type]


def fill(msg, fd: FieldDescriptor, draw, depth: int) -> None:
    mtype = fd.message_type
    if mtype is not None and mtype.GetOptions().map_entry:
        vfd = mtype.fields_by_name["value"]
        if vfd.message_type is not None:  # a map of messages (Scenario.strategies): each value built
            target = getattr(msg, fd.name)
            for key in draw(st.lists(STRINGS, max_size=3, unique=True)):
                build(target[key], draw, depth + 1)
            return
        entries = draw(st.dictionaries(STRINGS, scalar(vfd), max_size=4))
        getattr(msg, fd.name).update(entries)
    elif mtype is not None and mtype.full_name == "google.protobuf.Struct":
        getattr(msg, fd.name).update(draw(st.dictionaries(STRINGS, STRUCT_VALUES, max_size=4)))
    elif mtype is not None and mtype.full_name == "google.protobuf.Value":
        getattr(msg, fd.name).add().CopyFrom(struct_pb2.Value())
    elif fd.is_repeated and mtype is None:
        getattr(msg, fd.name).extend(draw(st.lists(scalar(fd), max_size=5)))
    elif fd.is_repeated:
        for _ in range(draw(st.integers(0, 2))):
            build(getattr(msg, fd.name).add(), draw, depth + 1)
    elif mtype is not None:
        build(getattr(msg, fd.name), draw, depth + 1)
    else:
        setattr(msg, fd.name, draw(scalar(fd)))


def build(msg, draw, depth: int = 0):
    if depth > 4:
        return msg
    for fd in msg.DESCRIPTOR.fields:
        if draw(st.booleans()):
            fill(msg, fd, draw, depth)
    return msg


def scalar_paths(desc, prefix=(), depth=0) -> list[tuple[str, ...]]:
    out = []
    for fd in desc.fields:
        mtype = fd.message_type
        if mtype is not None and not mtype.GetOptions().map_entry and not fd.is_repeated \
                and mtype.full_name != "google.protobuf.Struct" and depth < 4:
            out += scalar_paths(mtype, (*prefix, fd.name), depth + 1)
        else:
            out.append((*prefix, fd.name))
    return out


SCENARIO_PATHS = scalar_paths(scenario_pb2.Scenario.DESCRIPTOR)


@st.composite
def whole_requests(draw):
    return build(twin_service_pb2.PredictRequest(scenario=scenario_pb2.Scenario()), draw)


@st.composite
def mutated_scenarios(draw):
    scenario = scenario_from_mapping(BASE)
    for path in draw(st.lists(st.sampled_from(SCENARIO_PATHS), min_size=1, max_size=3)):
        node = scenario
        for name in path[:-1]:
            node = getattr(node, name)
        fill(node, node.DESCRIPTOR.fields_by_name[path[-1]], draw, 3)
    return scenario


@st.composite
def sweep_requests(draw):
    spec = sweep_service_pb2.SweepSpec(base=draw(mutated_scenarios()) if draw(st.booleans())
                                       else scenario_from_mapping(BASE))
    for _ in range(draw(st.integers(0, 3))):
        axis = spec.axes.add(path=draw(st.sampled_from(["plan.tp", "plan.pp", "plan.gbs", "model.seq_len",
                                                        "cluster.num_gpus", "", "plan", "x.y", "plan.tp.z"])))
        kind = draw(st.sampled_from(["values", "range", "sample", "none"]))
        if kind == "values":
            for v in draw(st.lists(STRUCT_VALUES, max_size=6)):
                axis.values.values.add().CopyFrom(struct_pb2.Value(number_value=v) if isinstance(v, float)
                                                  else struct_pb2.Value(string_value=str(v)))
        elif kind == "range":
            axis.range.start, axis.range.stop, axis.range.step = draw(FLOATS), draw(FLOATS), draw(FLOATS)
        elif kind == "sample":
            axis.sample.n = draw(INTS)
            if draw(st.booleans()):
                axis.sample.low, axis.sample.high = draw(FLOATS), draw(FLOATS)
            if draw(st.booleans()):
                axis.sample.seed = draw(INTS)
    spec.mode = draw(st.integers(0, 5))
    spec.objective.metric = draw(st.sampled_from(["", "mfu", "step_time_s", "nope"]))
    spec.objective.top = draw(INTS)
    return sweep_service_pb2.SweepRequest(spec=spec, rows_per_message=draw(INTS))


# --------------------------------------------------------------------------- tests
@settings(max_examples=900, **FUZZ)
@given(data=st.binary(max_size=256), method=st.sampled_from(METHODS))
def test_garbage_bytes(fuzz_channel, data, method):
    check(lambda: fuzz_channel.unary_unary(method)(data, timeout=10))


@settings(max_examples=900, **FUZZ)
@given(request=whole_requests())
def test_whole_hostile_messages(fuzz_channel, request):
    stub = twin_grpc.TwinServiceStub(fuzz_channel)
    check(lambda: stub.Predict(request, timeout=10))


@settings(max_examples=1300, **FUZZ)
@given(scenario=mutated_scenarios(), require_fit=st.booleans())
def test_mutated_valid_scenarios(fuzz_channel, scenario, require_fit):
    stub = twin_grpc.TwinServiceStub(fuzz_channel)
    check(lambda: stub.Predict(twin_service_pb2.PredictRequest(scenario=scenario, require_fit=require_fit),
                               timeout=10))


@settings(max_examples=300, **FUZZ)
@given(request=sweep_requests())
def test_hostile_sweeps(fuzz_channel, request):
    stub = sweep_grpc.SweepServiceStub(fuzz_channel)
    check(lambda: stub.Sweep(request, timeout=20))
    raw = fuzz_channel.unary_stream("/twin.rpc.v1.SweepService/Sweep")
    check(lambda: raw(request.SerializeToString()[::-1], timeout=10))


def test_huge_repeated_fields_and_absurd_sizes(fuzz_channel):
    stub = twin_grpc.TwinServiceStub(fuzz_channel)
    scenario = scenario_from_mapping(BASE)
    scenario.cluster.scale_out.oversubscription.extend([1.0] * 400_000)  # ~3.2 MB, under the byte limit
    check(lambda: stub.Predict(twin_service_pb2.PredictRequest(scenario=scenario), timeout=30))
    scenario = scenario_from_mapping(BASE)
    scenario.cluster.gpu.peak_tflops.update({f"p{i}": 1.0 for i in range(100_000)})
    check(lambda: stub.Predict(twin_service_pb2.PredictRequest(scenario=scenario), timeout=30))
    scenario = scenario_from_mapping({**BASE, "model": {"preset": "llama3.1-8b", "layers": 10**12,
                                                        "hybrid": {"pattern": "M" * 3_000_000}}})
    check(lambda: stub.Predict(twin_service_pb2.PredictRequest(scenario=scenario), timeout=30))
    for n in (10**12, 2**63 - 1, 0, -(2**63)):
        scenario = scenario_from_mapping(BASE)
        scenario.cluster.num_gpus = n
        scenario.plan.gbs = n
        check(lambda scenario=scenario: stub.Predict(twin_service_pb2.PredictRequest(scenario=scenario), timeout=30))


def test_server_survived(fuzz_server, fuzz_channel):
    health = health_pb2_grpc.HealthStub(fuzz_channel)
    assert health.Check(health_pb2.HealthCheckRequest(), timeout=5).status == health_pb2.HealthCheckResponse.SERVING
    ok = twin_grpc.TwinServiceStub(fuzz_channel).Predict(
        twin_service_pb2.PredictRequest(scenario=scenario_from_mapping(BASE)), timeout=10)
    assert ok.estimate.step_time_s > 0
    assert fuzz_server.proc.poll() is None
    assert not [r for r in fuzz_server.records if r.get("level") == "error"], fuzz_server.text()[-3000:]
    print(f"fuzz cases sent: {COUNT['cases']}")
    assert COUNT["cases"] >= 3000
