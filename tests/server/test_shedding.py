"""Shedding past capacity (issue 15, "under load"): calls waiting in gRPC core, unseen by the
worker pool, count towards the bound, and once over it every unary call is refused until a
fresh count shows the queue drained. The decision logic runs on fake clocks and counters here;
one test drives a real server whose accepting thread is held while calls pile up in core."""

from __future__ import annotations

import threading
from concurrent import futures

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from twin.engine import Engine
from twin.server import grpc_app
from twin.server.admission import AdmissionInterceptor, CountingExecutor
from twin.server.server_config import ServerConfig
from twin.server.shedding import CoreArrivals, StandingQueueGate


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class Core:
    """What channelz would say: calls gRPC core has received."""

    def __init__(self) -> None:
        self.started = 0

    def __call__(self) -> int:
        return self.started


def gate_with(core: Core, clock: Clock, high: int = 8, low: int = 2, persist_s: float = 0.0) -> StandingQueueGate:
    """A gate on fake clocks; ``persist_s`` 0: a queue in core trips it at the first read that sees it."""
    gate = StandingQueueGate(high=high, low=low, probe_s=0.01, idle_s=0.05, quiet_probe_s=0.1, quiet_after_s=1.0,
                             persist_s=persist_s, wall=clock)
    gate.watch(core)
    return gate


def arrive(gate: StandingQueueGate, core: Core, clock: Clock, *, pool_backlog: int = 0, pool_idle: bool = False,
           new_in_core: int = 1) -> bool:
    """One call arrives in core (with ``new_in_core - 1`` more behind it) and reaches Python."""
    core.started += new_in_core
    gate.arrived(pool_idle)
    return gate.refuse(pool_backlog)


def decide(gate: StandingQueueGate, pool_idle: bool, pool_backlog: int) -> bool:
    """A call that reached Python with nothing new in core."""
    gate.arrived(pool_idle)
    return gate.refuse(pool_backlog)


def test_a_queue_in_core_trips_the_gate_though_the_pool_has_no_backlog():
    clock, core = Clock(), Core()
    gate = gate_with(core, clock)
    assert not arrive(gate, core, clock)                         # nothing waits: admitted
    clock.t += 0.11
    assert arrive(gate, core, clock, new_in_core=9)              # 8 more wait in core: the bound
    assert gate.shedding and gate.trips == 1 and gate.in_core() == 8
    # The pool bound alone still trips it as before (no calls in core).
    other_core = Core()
    other = gate_with(other_core, clock)
    assert arrive(other, other_core, clock, pool_backlog=8) and other.waiting == 8


def test_a_burst_in_core_that_drains_within_persist_s_is_not_shed_a_standing_queue_is():
    clock, core = Clock(), Core()
    gate = gate_with(core, clock, persist_s=0.1)
    assert not arrive(gate, core, clock, new_in_core=12)         # over the bound: noted, not shed
    for _ in range(11):                                          # Python catches up within 0.05 s
        clock.t += 0.005
        assert not arrive(gate, core, clock, new_in_core=0)
    assert gate.trips == 0
    clock.t += 0.011
    assert not arrive(gate, core, clock)                         # a fresh read under the bound: forgotten
    clock.t += 0.011
    assert not arrive(gate, core, clock, new_in_core=20)         # a new queue: noted
    refused = []
    for _ in range(20):                                          # it stands: one arrives per one taken
        clock.t += 0.011
        refused.append(arrive(gate, core, clock, new_in_core=1))
    # Seen at the next read (quiet: within 0.1 s), shed once it stood persist_s (0.1 s) more.
    first = refused.index(True)
    assert 9 <= first <= 19 and all(refused[first:])
    assert gate.trips == 1 and gate.shedding
    # A queue over the bound that shrinks from one interval to the next (the backlog of a
    # stall, served faster than calls arrive) is left to drain.
    third_core = Core()
    third = gate_with(third_core, clock, persist_s=0.1)
    assert not arrive(third, third_core, clock, new_in_core=60)
    for _ in range(20):                                          # 2 taken per 1 arriving
        clock.t += 0.011
        assert not arrive(third, third_core, clock, new_in_core=1)
        third.arrived(False)
    assert third.trips == 0
    # The workers' own backlog at the bound is refused at once, as before.
    other_core = Core()
    other = gate_with(other_core, clock, persist_s=0.1)
    assert arrive(other, other_core, clock, pool_backlog=8)


def test_shedding_refuses_every_call_until_a_fresh_count_shows_the_queue_drained():
    clock, core = Clock(), Core()
    gate = gate_with(core, clock)
    assert arrive(gate, core, clock, new_in_core=20)             # 19 behind it: shedding
    # Python takes the waiting calls; none new arrive. Between reads the count says the queue
    # fell to the low-water mark, but a stale count never reopens the gate.
    for _ in range(17):
        clock.t += 0.0001
        assert decide(gate, False, 0)
    assert gate.in_core() == 2 and gate.shedding
    clock.t += 0.01                                              # a fresh read: 1 left, below low
    assert not decide(gate, False, 0)
    assert not gate.shedding and gate.trips == 1
    # While shedding, a queue still above the low-water mark keeps it shedding at every read.
    clock.t += 0.01
    assert arrive(gate, core, clock, new_in_core=12)
    for _ in range(3):
        clock.t += 0.01
        assert arrive(gate, core, clock, new_in_core=1)          # as many arrive as are taken
    assert gate.trips == 2


def test_core_is_read_rarely_until_shedding_and_often_for_a_while_after():
    clock, core = Clock(), Core()
    reads: list[float] = []

    def counted() -> int:
        reads.append(clock.t)
        return core.started

    gate = StandingQueueGate(high=8, low=2, probe_s=0.01, quiet_probe_s=0.1, quiet_after_s=1.0, persist_s=0.0,
                             wall=clock)
    gate.watch(counted)
    reads.clear()
    for _ in range(100):                                         # 0.5 s of calls, nothing waiting
        clock.t += 0.005
        assert not arrive(gate, core, clock)
    assert 4 <= len(reads) <= 5                                  # one read per 0.1 s
    clock.t += 0.11
    assert arrive(gate, core, clock, new_in_core=10)             # trips
    reads.clear()
    for _ in range(10):                                          # shedding: a read each 0.01 s
        clock.t += 0.011
        arrive(gate, core, clock, new_in_core=0)
    assert len(reads) == 10 and not gate.shedding                # drained and reopened
    reads.clear()
    for _ in range(10):                                          # just after: still each 0.01 s
        clock.t += 0.011
        assert not arrive(gate, core, clock)
    assert len(reads) == 10
    clock.t += 2.0                                               # long after: rare again
    reads.clear()
    for _ in range(10):
        clock.t += 0.011
        assert not arrive(gate, core, clock)
    assert len(reads) == 1


def test_the_pool_backlog_counts_towards_the_low_water_mark():
    clock, core = Clock(), Core()
    gate = gate_with(core, clock)
    assert arrive(gate, core, clock, pool_backlog=8)
    clock.t += 0.02
    assert arrive(gate, core, clock, pool_backlog=3)             # core empty, 3 wait for a worker
    clock.t += 0.02
    assert not arrive(gate, core, clock, pool_backlog=2)


def test_without_a_core_count_the_gate_is_the_pool_bound_with_hysteresis():
    clock = Clock()
    gate = StandingQueueGate(high=8, low=2, wall=clock)
    gate.watch(None)
    assert not decide(gate, False, 7)
    assert decide(gate, False, 8)
    assert decide(gate, False, 3)                   # still shedding above low
    assert not decide(gate, False, 2)


def test_calls_core_ended_unseen_are_forgotten_after_an_idle_spell():
    clock, core = Clock(), Core()
    gate = gate_with(core, clock)
    core.started += 30                                           # e.g. cancelled while waiting in core
    clock.t += 0.001
    assert arrive(gate, core, clock, pool_idle=False)            # the pool was busy: they count
    clock.t += 0.2                                               # no call for idle_s, pool idle
    assert not arrive(gate, core, clock, pool_idle=True)
    assert gate.in_core() == 0 and not gate.shedding
    # A quiet spell while the pool still runs work proves nothing: the count stands.
    core.started += 30
    clock.t += 0.2
    assert arrive(gate, core, clock, pool_idle=False)


def test_gate_bounds_are_checked():
    with pytest.raises(ValueError, match="low"):
        StandingQueueGate(high=4, low=4)


def test_core_arrivals_counts_the_calls_a_real_server_received():
    server, arrivals = CoreArrivals.around(lambda: grpc.server(futures.ThreadPoolExecutor(2)))
    assert arrivals is not None and arrivals() == 0
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "test.Echo", {"Call": grpc.unary_unary_rpc_method_handler(lambda r, c: r)}),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.unary_unary("/test.Echo/Call")
            assert [call(b"x", timeout=10) for _ in range(3)] == [b"x"] * 3
        assert arrivals() == 3
    finally:
        server.stop(None).wait(10)


class HoldSecond(grpc.ServerInterceptor):
    """Holds gRPC's accepting thread on the second call until ``count`` calls reached core
    (what a GIL-starved accepting thread does while the workers are busy)."""

    def __init__(self, arrivals: list, count: int) -> None:
        self.arrivals = arrivals
        self.count = count
        self.calls = 0

    def intercept_service(self, continuation, handler_call_details):
        self.calls += 1
        if self.calls == 2:
            done = threading.Event()
            for _ in range(1000):                                # at most ~10 s
                if (self.arrivals[0]() or 0) >= self.count or done.wait(0.01):
                    break
        return continuation(handler_call_details)


def test_calls_piled_up_in_core_are_refused_though_the_pool_never_filled():
    executor = CountingExecutor(max_workers=2, thread_name_prefix="test-shedding")
    # Read core's count at every call (probe_s 0): how long the hold lasts does not matter.
    # keep_busy 0: this test is of the gate's count alone (keeping workers busy is tested below)
    admission = AdmissionInterceptor(executor, max_queued=4, gate=StandingQueueGate(
        high=4, low=1, probe_s=0.0, quiet_probe_s=0.0, persist_s=0.0), keep_busy=0)
    arrivals: list = [None]
    hold = HoldSecond(arrivals, count=13)
    server, counter = CoreArrivals.around(lambda: grpc.server(executor, interceptors=[admission, hold]))
    assert counter is not None
    arrivals[0] = counter
    admission.watch(counter)
    release = threading.Event()

    def slow(request: bytes, context: grpc.ServicerContext) -> bytes:
        release.wait(20)
        return request

    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.Echo", {
        "Call": grpc.unary_unary_rpc_method_handler(lambda r, c: r),
        "Slow": grpc.unary_unary_rpc_method_handler(slow)}),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            busy = channel.unary_unary("/test.Echo/Slow").future(b"s", timeout=20)
            for _ in range(1000):                                # the worker holds the slow call
                if not executor.idle:
                    break
                release.wait(0.01)
            call = channel.unary_unary("/test.Echo/Call")
            pending = [call.future(b"x", timeout=20) for _ in range(12)]
            codes = []
            for f in pending:
                try:
                    f.result()
                    codes.append(grpc.StatusCode.OK)
                except grpc.RpcError as err:
                    codes.append(err.code())
                    assert "limits.max_queued_rpcs" in err.details()
            release.set()
            assert busy.result() == b"s"
        # The pool never had 4 calls waiting (one slow call ran; the rest are echoes), yet the
        # 11 calls that waited behind the held thread were over the bound: refused, not queued.
        refused = codes.count(grpc.StatusCode.RESOURCE_EXHAUSTED)
        assert refused >= 9, codes
        assert admission.gate.trips >= 1 and admission.refused == refused
    finally:
        release.set()
        server.stop(None).wait(10)
        executor.shutdown()


def test_the_server_counts_the_calls_core_received_on_its_main_port(tmp_path):
    running = grpc_app.build_server(ServerConfig(port=0, state_dir=str(tmp_path / "state"), plugins_autoload=False,
                                            grace_s=1.0), Engine(autoload=False))
    admission = running.admission
    assert admission is not None
    gate = admission.gate
    grpc_app.start(running)
    try:
        with grpc.insecure_channel(running.address) as channel:
            check = health_pb2_grpc.HealthStub(channel).Check
            serving = health_pb2.HealthCheckResponse.SERVING
            for _ in range(3):
                assert check(health_pb2.HealthCheckRequest(), timeout=10).status == serving
        # The gate watches this server's own count: every call core received reached Python.
        assert gate.received() == gate.seen == 3
        assert gate.in_core() == 0 and not gate.shedding
    finally:
        grpc_app.stop(running)


class _Details:
    def __init__(self, method: str) -> None:
        self.method = method
        self.invocation_metadata = ()


def test_while_shedding_a_call_is_still_served_when_the_workers_are_out_of_work():
    """Shedding refuses what waits, but a pool with fewer than keep_busy calls gets the next
    one: refusing everything left the workers idle and served a fraction of capacity."""
    class Shedding(StandingQueueGate):
        """An episode under way for every call (the gate's own tests cover when one starts)."""

        def refuse(self, pool_backlog: int) -> bool:
            self.shedding, self.waiting = True, 10
            return True

    executor = CountingExecutor(max_workers=2, thread_name_prefix="test-keep-busy")
    admission = AdmissionInterceptor(executor, max_queued=4, gate=Shedding(high=4, low=1), keep_busy=1)
    handler = grpc.unary_unary_rpc_method_handler(lambda r, c: r)
    try:
        got = admission.intercept_service(lambda d: handler, _Details("/test.Echo/Call"))
        assert got is handler and admission.kept_busy == 1 and admission.refused == 0
        release = threading.Event()
        executor.submit(release.wait, 10)  # one call running: no longer out of work
        try:
            got = admission.intercept_service(lambda d: handler, _Details("/test.Echo/Call"))
            assert got is not handler and admission.refused == 1 and admission.kept_busy == 1
        finally:
            release.set()
    finally:
        executor.shutdown()


def test_the_dedicated_otlp_port_counts_the_calls_waiting_in_its_core_queue(tmp_path):
    """The dedicated OTLP/gRPC server sheds with the calls in its own core queue counted, as the
    main port does: without that count its pool bound was blind to the queue in core, which grew
    to gRPC's own bound (983 exports CANCELLED at 2x load, refusals after 0.6 s at p50; issue 39)."""
    from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2

    from twin.telemetry.extension import attach
    from twin.telemetry.telemetry_config import TelemetryConfig

    pool = CountingExecutor(max_workers=2, thread_name_prefix="test-otlp")
    shed = AdmissionInterceptor(pool, max_queued=8)
    main = grpc.server(futures.ThreadPoolExecutor(1))
    service, dedicated = attach(main, Engine(autoload=False),
                                TelemetryConfig(state_dir=tmp_path, otlp_address="127.0.0.1:0", calibrate_interval_s=0),
                                admitted_pool=lambda workers, prefix: (pool, shed))
    try:
        assert dedicated is not None and shed.gate._arrivals is not None
        before = shed.gate._arrivals()
        with grpc.insecure_channel(service.otlp_grpc_address) as channel:
            export = channel.unary_unary("/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
                                         request_serializer=None, response_deserializer=None)
            for _ in range(3):
                export(metrics_service_pb2.ExportMetricsServiceRequest().SerializeToString(), timeout=20)
        assert shed.gate._arrivals() == before + 3  # the dedicated server's own count, not the main one's
    finally:
        dedicated.stop(0)
        service.close()
        pool.shutdown(wait=False)
