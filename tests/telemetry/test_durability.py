"""OK means durable (issue 15, holes 1 and 2): a failed state write is not answered OK on the
exporter's retry, a timestamp no database can hold is refused, not stored, and kill -9 during
ingest while writes are failing loses no acknowledged point."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time

import grpc
import pytest

from tests.telemetry.conftest import EXAMPLES, ROOT, pb, pbg
from twin.engine import Engine
from twin.telemetry.otlpbuild import request
from twin.telemetry.service import InvalidData, TelemetryService
from twin.telemetry.telemetry_config import TelemetryConfig


@pytest.fixture
def svc(tmp_path):
    s = TelemetryService(Engine(autoload=False), TelemetryConfig(state_dir=tmp_path, calibrate_interval_s=0))
    s.register_job("j", (EXAMPLES / "gpt3-175b-dgx-h100-ib.yaml").read_text())
    yield s
    s.close()


def _step(t: int, value: float = 7.0):
    return request({}, [("twin.training.step_time", "gauge", [({"job": "j"}, 0, t, value)])])


def _stored_observations(svc: TelemetryService) -> int:
    with svc.store._lock:
        return svc.store._db.execute("SELECT COUNT(*) FROM observations").fetchone()[0]


def test_a_retry_after_a_failed_write_is_ok_only_once_the_points_are_stored(svc, monkeypatch):
    real = svc.store.commit_batch
    calls = {"n": 0}

    def failing_once(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError(28, "No space left on device")
        return real(*args, **kwargs)

    monkeypatch.setattr(svc.store, "commit_batch", failing_once)
    before = _stored_observations(svc)
    t = time.time_ns()
    with pytest.raises(OSError):
        svc.ingest(_step(t), timeout=10)
    assert _stored_observations(svc) == before        # nothing acknowledged, nothing written
    rejected, _ = svc.ingest(_step(t), timeout=10)    # the exporter's retry: the same point
    assert rejected == 0
    assert _stored_observations(svc) == before + 1    # answered OK: now it is on disk
    assert svc.stats["points_accepted"] == 1          # counted once, when it was stored


@pytest.mark.parametrize("t", [2**64 - 1, 2**63, time.time_ns() + 10 * 24 * 3600 * 10**9])
def test_an_impossible_timestamp_is_refused_and_state_stays_readable(svc, t):
    try:
        rejected, message = svc.ingest(_step(t), timeout=10)
    except InvalidData as err:
        rejected, message = 1, str(err)
    assert rejected == 1 and "timestamp" in message
    # The next good point is stored and live state still answers.
    assert svc.ingest(_step(time.time_ns()), timeout=10)[0] == 0
    state = svc.live_state()
    assert state["ingest"]["points_rejected"] >= 1 and state["components"]


def test_job_names_and_the_number_of_jobs_are_bounded(svc, monkeypatch):
    import twin.telemetry.service as service_mod
    from twin.core.errors import SpecError, TooLargeError

    text = (EXAMPLES / "gpt3-175b-dgx-h100-ib.yaml").read_text()
    with pytest.raises(SpecError) as err:
        svc.register_job("x" * 10_000_000, text)
    assert err.value.field == "job" and "at most 256" in str(err.value)
    with pytest.raises(SpecError):
        svc.register_job("bad\x00name", text)
    monkeypatch.setattr(service_mod, "MAX_JOBS", 3)
    svc.register_job("k1", text)
    svc.register_job("k2", text)
    with pytest.raises(TooLargeError) as full:
        svc.register_job("k3", text)               # "j" (the fixture's) + k1 + k2 = 3
    assert full.value.field == "job"
    assert svc.register_job("k1", text) > 0        # re-registering a known name still works


# ---------------------------------------------------------------- kill -9 while writes fail
SENDERS = 3          # exporters, each with its own job and port, sending one request after another
KILL_AFTER = 45      # acknowledged requests (all senders) before the SIGKILL
FAIL_EVERY = 3       # every 3rd commit fails (store.FAULT_ENV)


def _standalone(state_dir, env_extra: dict[str, str]) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "TWIN_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONUNBUFFERED": "1", **env_extra}
    proc = subprocess.Popen([sys.executable, "-m", "twin.telemetry.standalone", "--state-dir", str(state_dir),
                             "--host", "127.0.0.1", "--port", "0", "--calibrate-interval", "0"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    match = re.search(r"listening on (\S+)", line)
    if not match:
        proc.kill()
        proc.wait(timeout=30)
        raise AssertionError(f"telemetry server did not start: {line!r}")
    return proc, match.group(1)


def _request(sender: int, n: int, t: int) -> bytes:
    """Request ``n`` of ``sender``: one step-time point of its job and one counter point of its port."""
    return request({"host.name": f"node-{sender}"}, [
        ("twin.training.step_time", "gauge", [({"job": f"job-{sender}"}, 0, t, 1.0 + n)]),
        ("node_infiniband_port_data_transmitted_bytes_total", "sum",
         [({"device": "mlx5_0", "port": "1"}, 1, t, 1000.0 * n)])]).SerializeToString()


def test_kill9_during_ingest_while_writes_fail_loses_no_acknowledged_point(tmp_path):
    from twin.telemetry.store import FAULT_ENV, Store

    state_dir = tmp_path / "state"
    proc, address = _standalone(state_dir, {FAULT_ENV: str(FAIL_EVERY)})
    acked: list[tuple[int, int, float]] = []   # (sender, time ns, step value) answered OK
    refused = [0]                              # answers that were not OK (the injected failures)
    lock = threading.Lock()
    stop = threading.Event()
    t0 = time.time_ns() - 600 * 10**9

    def sender(k: int) -> None:
        channel = grpc.insecure_channel(address)
        export = channel.unary_unary("/opentelemetry.proto.collector.metrics.v1.MetricsService/Export")
        n = 0
        try:
            while not stop.is_set():
                t = t0 + n * 10**6 + k           # distinct and increasing per sender
                body = _request(k, n, t)
                while not stop.is_set():        # an exporter retries the same request until OK
                    try:
                        export(body, timeout=5)
                    except grpc.RpcError:
                        with lock:
                            refused[0] += 1
                        continue
                    with lock:
                        acked.append((k, t, 1.0 + n))
                    break
                n += 1
        finally:
            channel.close()

    threads = [threading.Thread(target=sender, args=(k,), daemon=True) for k in range(SENDERS)]
    for th in threads:
        th.start()
    try:
        deadline = time.monotonic() + 60
        while len(acked) < KILL_AFTER and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.005)
        os.kill(proc.pid, signal.SIGKILL)          # mid-stream: the senders are still sending
        proc.wait(timeout=30)
    finally:
        stop.set()
        for th in threads:
            th.join(timeout=30)
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    with lock:
        acknowledged = list(acked)
    assert len(acknowledged) >= KILL_AFTER, "the server stopped acknowledging before the kill"
    assert refused[0] > 0, "no write failed: the fault hook did not fire"

    again, address = _standalone(state_dir, {})
    try:
        stub = pbg.TelemetryServiceStub(grpc.insecure_channel(address))
        live = {c.id: c for c in stub.GetLiveState(pb.GetLiveStateRequest(kinds=["ib_port"]), timeout=30).components}
        store = Store(state_dir / "telemetry.sqlite3")
        try:
            stored = set(store.load_observations())
        finally:
            store.close()
    finally:
        again.terminate()
        again.wait(timeout=30)
    # Every acknowledged step-time point is stored, value and all...
    missing = [(f"job-{k}", t, v) for k, t, v in acknowledged if (f"job-{k}", t, v) not in stored]
    assert not missing, f"{len(missing)} of {len(acknowledged)} acknowledged points lost, e.g. {missing[:3]}"
    # ...and every port has seen at least its last acknowledged point.
    for k in range(SENDERS):
        last = max(t for s, t, _ in acknowledged if s == k)
        assert live[f"node-{k}/ib_port:mlx5_0/1"].last_seen_unix_nano >= last
