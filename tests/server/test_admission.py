"""Load shedding (issue 15, "under load"): past the queue bound a unary call is refused at once
with a retry hint, Health never is, and the backlog count does not drift."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_status import rpc_status

from twin.core.errors import SpecError
from twin.server.admission import POOL_ATTRIBUTE, AdmissionInterceptor, CountingExecutor, InlineRefusals
from twin.server.server_config import load_config

SLOW = "/test.Slow/Call"


@pytest.fixture()
def slow_server():
    """A real gRPC server (one worker, at most 2 waiting) whose test method blocks until released."""
    release = threading.Event()
    started = threading.Semaphore(0)
    executor = CountingExecutor(max_workers=1, thread_name_prefix="test-admission")
    admission = AdmissionInterceptor(executor, max_queued=2)

    def call(request: bytes, context: grpc.ServicerContext) -> bytes:
        started.release()
        release.wait(20)
        return request

    handler = grpc.method_handlers_generic_handler("test.Slow", {"Call": grpc.unary_unary_rpc_method_handler(call)})
    server = grpc.server(executor, interceptors=[admission], handlers=[handler])
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield channel, executor, admission, release, started
    finally:
        release.set()
        channel.close()
        server.stop(None).wait(10)


def _wait_for(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.01)


def test_past_the_queue_bound_a_call_is_refused_at_once_with_retry_info(slow_server):
    channel, executor, admission, release, started = slow_server
    call = channel.unary_unary(SLOW)
    running = call.future(b"a", timeout=20)
    assert started.acquire(timeout=10)                       # the only worker is busy
    waiting = [call.future(b"b", timeout=20), call.future(b"c", timeout=20)]
    _wait_for(lambda: executor.queued == 2)
    t0 = time.monotonic()
    with pytest.raises(grpc.RpcError) as err:
        call(b"d", timeout=20)
    # Refused while the worker is still blocked: it did not wait for the backlog to run.
    assert time.monotonic() - t0 < 15 and not release.is_set()
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "limits.max_queued_rpcs" in err.value.details()
    status = rpc_status.from_call(err.value)
    kinds = {d.type_url.rsplit(".", 1)[-1] for d in status.details}
    assert {"RetryInfo", "QuotaFailure"} <= kinds
    for detail in status.details:
        if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            info = error_details_pb2.RetryInfo()
            detail.Unpack(info)
            assert info.retry_delay.seconds * 1e9 + info.retry_delay.nanos >= 0.05e9
    trailers = dict(err.value.trailing_metadata())
    assert float(trailers["retry-after-s"]) >= 0.05
    assert admission.refused == 1
    # Answered on the accepting thread, the request never read (not on a pool thread): if a
    # gRPC upgrade changed how it hands calls to a pool, this is what would show it.
    assert admission.refusals.inline == 1
    release.set()
    assert [f.result(timeout=10) for f in (running, *waiting)] == [b"a", b"b", b"c"]
    _wait_for(lambda: executor.queued == 0)
    assert call(b"e", timeout=10) == b"e"                     # admitted again once drained


def test_health_is_never_refused_by_the_queue_bound(slow_server):
    channel, executor, admission, release, started = slow_server
    call = channel.unary_unary(SLOW)
    futures = [call.future(b"x", timeout=20)]
    assert started.acquire(timeout=10)
    futures += [call.future(b"y", timeout=20), call.future(b"z", timeout=20)]
    _wait_for(lambda: executor.queued == 2)
    check = health_pb2_grpc.HealthStub(channel).Check.future(health_pb2.HealthCheckRequest(), timeout=20)
    _wait_for(lambda: executor.queued == 3)                  # admitted and queued, not refused
    release.set()
    assert check.result(timeout=10).status == health_pb2.HealthCheckResponse.SERVING
    assert admission.refused == 0
    for f in futures:
        f.result(timeout=10)


@pytest.fixture()
def model_server():
    """A real gRPC server whose ``test.Model`` calls run on a model pool of one worker (at most
    one waiting) and whose other calls run on the server's pool of four."""
    release = threading.Event()
    started = threading.Semaphore(0)
    executor = CountingExecutor(max_workers=4, thread_name_prefix="test-server")
    model_pool = CountingExecutor(max_workers=1, thread_name_prefix="test-model")
    admission = AdmissionInterceptor(executor, max_queued=1, model_pool=model_pool,
                                     model_methods=frozenset({"/test.Model/Block", "/test.Model/Quick"}))
    threads: dict[bytes, str] = {}

    def blocking(request: bytes, context: grpc.ServicerContext) -> bytes:
        threads[request] = threading.current_thread().name
        started.release()
        release.wait(20)
        return request

    def quick(request: bytes, context: grpc.ServicerContext) -> bytes:
        threads[request] = threading.current_thread().name
        return request

    handlers = [grpc.method_handlers_generic_handler(name, {"Block": grpc.unary_unary_rpc_method_handler(blocking),
                                                            "Quick": grpc.unary_unary_rpc_method_handler(quick)})
                for name in ("test.Model", "test.Other")]
    server = grpc.server(executor, interceptors=[admission], handlers=handlers)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield channel, executor, model_pool, admission, release, started, threads
    finally:
        release.set()
        channel.close()
        server.stop(None).wait(10)
        model_pool.shutdown(wait=False, cancel_futures=True)


def test_model_calls_run_on_their_own_pool_and_its_backlog_sheds_only_them(model_server):
    channel, executor, model_pool, admission, release, started, threads = model_server
    block = channel.unary_unary("/test.Model/Block")
    running = block.future(b"m1", timeout=20)
    assert started.acquire(timeout=10)                       # the model pool's only worker is busy
    assert threads[b"m1"].startswith("test-model")
    waiting = block.future(b"m2", timeout=20)
    _wait_for(lambda: model_pool.queued == 1)
    # The model pool's backlog is at its bound: the next model call is refused at once ...
    with pytest.raises(grpc.RpcError) as err:
        channel.unary_unary("/test.Model/Quick")(b"m3", timeout=20)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "limits.max_queued_rpcs" in err.value.details() and "one of 1 workers" in err.value.details()
    assert not release.is_set()
    assert admission.refused == 1
    # Once the backlog drains the episode ends: the next call (on either pool) is admitted.
    release.set()
    assert running.result(timeout=10) == b"m1" and waiting.result(timeout=10) == b"m2"
    assert channel.unary_unary("/test.Other/Quick")(b"o1", timeout=10) == b"o1"
    assert threads[b"o1"].startswith("test-server")
    assert channel.unary_unary("/test.Model/Quick")(b"m4", timeout=10) == b"m4"
    assert threads[b"m4"].startswith("test-model")
    assert executor.queued == 0 and model_pool.queued == 0


def test_other_calls_are_served_while_every_model_worker_is_busy(model_server):
    channel, _, _, admission, release, started, threads = model_server
    running = channel.unary_unary("/test.Model/Block").future(b"m1", timeout=20)
    assert started.acquire(timeout=10)
    # Not behind the model call: the server's pool has idle workers and its backlog is empty.
    assert channel.unary_unary("/test.Other/Quick")(b"o1", timeout=10) == b"o1"
    assert threads[b"o1"].startswith("test-server") and not release.is_set()
    release.set()
    assert running.result(timeout=10) == b"m1"
    assert admission.refused == 0


def test_a_predict_runs_on_the_model_pool_and_a_fleet_or_failure_analysis_does_not():
    """The default MODEL_METHODS: Predict and Validate on the model pool; the long model calls
    (many evaluations each) and PredictLive (it waits for the telemetry lock) on the server's,
    where they cannot hold every Predict back."""
    executor = CountingExecutor(max_workers=4, thread_name_prefix="test-server")
    model_pool = CountingExecutor(max_workers=2, thread_name_prefix="test-model")
    admission = AdmissionInterceptor(executor, max_queued=8, model_pool=model_pool)
    threads: dict[str, str] = {}

    def named(method: str):
        def behaviour(request: bytes, context: grpc.ServicerContext) -> bytes:
            threads[method] = threading.current_thread().name
            return request
        return grpc.unary_unary_rpc_method_handler(behaviour)

    calls = {"twin.rpc.v1.TwinService": ("Predict", "Validate", "PredictFleet", "GetCatalog"),
             "twin.rpc.v1.FailureService": ("EvaluateFailures",),
             "twin.rpc.v1.TelemetryService": ("PredictLive", "Calibrate", "GetDivergence", "RegisterJob")}
    handlers = [grpc.method_handlers_generic_handler(service, {m: named(f"{service}/{m}") for m in methods})
                for service, methods in calls.items()]
    server = grpc.server(executor, interceptors=[admission], handlers=handlers)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            for service, methods in calls.items():
                for m in methods:
                    assert channel.unary_unary(f"/{service}/{m}")(b"x", timeout=10) == b"x"
    finally:
        server.stop(None).wait(10)
        model_pool.shutdown(wait=False, cancel_futures=True)
    on_model = {m for m, name in threads.items() if name.startswith("test-model")}
    assert on_model == {"twin.rpc.v1.TwinService/Predict", "twin.rpc.v1.TwinService/Validate"}
    assert len(threads) == 9 and all(name.startswith(("test-model", "test-server")) for name in threads.values())


def test_model_workers_is_validated_and_read_from_the_environment():
    assert load_config(None, env={"TWIN_LIMITS_MODEL_WORKERS": "3"}).limits.model_workers == 3
    assert load_config(None).limits.model_workers == 1
    with pytest.raises(SpecError) as err:
        load_config(None, env={"TWIN_LIMITS_MODEL_WORKERS": "0"})
    assert "limits.model_workers" in str(err.value)


def test_a_call_cancelled_before_it_starts_leaves_the_backlog_count():
    executor = CountingExecutor(max_workers=1)
    gate = threading.Event()
    first = executor.submit(gate.wait, 10)
    _wait_for(lambda: executor.queued == 0)                  # the first call runs
    pending: list[Future] = [executor.submit(lambda: None) for _ in range(3)]
    assert executor.queued == 3
    assert pending[1].cancel()
    assert executor.queued == 2
    gate.set()
    first.result(timeout=10)
    for f in (pending[0], pending[2]):
        f.result(timeout=10)
    assert executor.queued == 0
    assert executor.mean_service_s > 0
    executor.shutdown()


def test_max_queued_rpcs_is_validated_and_read_from_the_environment():
    assert load_config(None, env={"TWIN_LIMITS_MAX_QUEUED_RPCS": "7"}).limits.max_queued_rpcs == 7
    with pytest.raises(SpecError) as err:
        load_config(None, env={"TWIN_LIMITS_MAX_QUEUED_RPCS": "0"})
    assert "max_queued_rpcs" in str(err.value)


def test_inline_refusals_run_a_refusal_now_with_a_placeholder_request_and_anything_else_on_a_thread():
    pool = InlineRefusals()
    seen: list[object] = []

    def behaviour(request: object, context: object) -> None:
        raise AssertionError("gRPC calls the behaviour, not the pool")

    setattr(behaviour, POOL_ATTRIBUTE, pool)

    def blocking_thunk() -> object:
        raise AssertionError("the request thunk would block on the accepting thread")

    def in_pool(event: str, behaviour_: object, thunk, serializer: object) -> str:
        seen.append(thunk())
        return threading.current_thread().name

    caller = threading.current_thread().name
    ran = pool.submit(in_pool, "event", behaviour, blocking_thunk, None)
    assert ran.done() and ran.result() == caller and pool.inline == 1
    assert seen and seen[0] is not None                     # a placeholder, never None (None: "cancelled")
    # Not laid out as a refusal: run by the pool's own thread, counted apart.
    other = pool.submit(lambda: threading.current_thread().name)
    assert other.result(timeout=10).startswith("twin-refusals") and pool.inline == 1
    failing = pool.submit(lambda *a: 1 / 0, behaviour, blocking_thunk)
    with pytest.raises(ZeroDivisionError):
        failing.result()
    pool.shutdown()
