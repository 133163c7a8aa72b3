"""OK means durable (issue 15, holes 1 and 2): a failed state write is not answered OK on the
exporter's retry, and a timestamp no database can hold is refused, not stored."""

from __future__ import annotations

import time

import pytest

from tests.telemetry.conftest import EXAMPLES
from twin.engine import Engine
from twin.telemetry.config import TelemetryConfig
from twin.telemetry.otlpbuild import request
from twin.telemetry.service import InvalidData, TelemetryService


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
