"""What a batch writes: a component's whole record when it is new or reassessed, only its
signals and last-seen time otherwise; a restart reads both back as one record."""

from __future__ import annotations

import errno
import json
import time

import pytest

from twin.engine import Engine
from twin.telemetry.otlpbuild import request
from twin.telemetry.service import TelemetryService
from twin.telemetry.store import pack_signals, unpack_signals
from twin.telemetry.telemetry_config import TelemetryConfig

S = 10**9
PORT = {"device": "mlx5_0", "port": "1"}
CID = "n1/ib_port:mlx5_0/1"


def _service(state_dir) -> TelemetryService:
    return TelemetryService(Engine(autoload=False), TelemetryConfig(state_dir=state_dir, calibrate_interval_s=0))


def _push(svc: TelemetryService, t: int, tx_bytes: float, symbol_errors: float) -> None:
    req = request({"host.name": "n1"}, [
        ("node_infiniband_port_data_transmitted_bytes_total", "sum", [(PORT, 1, t, tx_bytes)]),
        ("node_infiniband_symbol_error_total", "sum", [(PORT, 1, t, symbol_errors)]),
        ("node_infiniband_state_id", "gauge", [(PORT, 0, t, 4.0)])])
    assert svc.ingest(req, timeout=10) == (0, "")


def _rows(svc: TelemetryService) -> tuple[dict, tuple[int, dict]]:
    with svc.store._lock:
        data = svc.store._db.execute("SELECT data FROM components WHERE id = ?", (CID,)).fetchone()[0]
        live = svc.store._db.execute("SELECT last_seen_ns, names, vals FROM component_live WHERE id = ?",
                                     (CID,)).fetchone()
    return json.loads(data), (live[0], unpack_signals(live[1], live[2]))


@pytest.fixture
def t0() -> int:
    return time.time_ns() - 600 * S


def test_a_batch_that_moves_only_rates_writes_signals_not_the_record(tmp_path, t0) -> None:
    svc = _service(tmp_path)
    _push(svc, t0, 0.0, 0.0)
    _push(svc, t0 + 10 * S, 1e9, 0.0)             # first rates: reassessed, whole record written
    record, _ = _rows(svc)
    _push(svc, t0 + 20 * S, 3e9, 0.0)             # tx rate moves; no rule's signal does
    again, (last_seen, signals) = _rows(svc)
    assert again == record                         # the record was not rewritten...
    assert last_seen == t0 + 20 * S and signals["tx_Bps"] == pytest.approx(2e8)  # ...its live row was
    live = svc.live_state()["components"][0]
    svc.close()

    restored = _service(tmp_path)
    try:
        comp = restored.live_state()["components"][0]
        assert comp["signals"] == live["signals"] and comp["last_seen_ns"] == t0 + 20 * S
        assert comp["state"] == live["state"] == "up"
    finally:
        restored.close()


def test_a_reassessment_that_changes_health_rewrites_the_record(tmp_path, t0) -> None:
    svc = _service(tmp_path)
    try:
        _push(svc, t0, 0.0, 0.0)
        _push(svc, t0 + 10 * S, 1e9, 0.0)
        _push(svc, t0 + 20 * S, 2e9, 500.0)       # 50 symbol errors/s: over the ibqueryerrors threshold
        record, (last_seen, signals) = _rows(svc)
        assert record["state"] == "degraded" and record["evidence"][0][0] == "symbol_errors_per_s"
        assert record["last_seen_ns"] == last_seen == t0 + 20 * S and record["signals"] == signals
    finally:
        svc.close()


def _restart_after(tmp_path, t0, sql: str, *params: object) -> tuple[dict, TelemetryService]:
    """Two pushes, ``sql`` run on the state database, and a restart: (the record before, the service after)."""
    svc = _service(tmp_path)
    _push(svc, t0, 0.0, 0.0)
    _push(svc, t0 + 10 * S, 1e9, 0.0)
    record, _ = _rows(svc)
    with svc.store._lock:
        svc.store._db.execute(sql, params)
    svc.close()
    return record, _service(tmp_path)


def test_a_database_without_live_rows_restores_from_the_records(tmp_path, t0) -> None:
    """A state directory written before component_live existed holds everything in the record."""
    record, restored = _restart_after(tmp_path, t0, "DELETE FROM component_live")
    try:
        comp = restored.live_state()["components"][0]
        assert comp["signals"] == record["signals"] and comp["last_seen_ns"] == record["last_seen_ns"]
    finally:
        restored.close()


def test_signals_pack_and_unpack_exactly() -> None:
    signals = {"tx_Bps": 1e9 / 3, "state": 4.0, "errors_per_s": 0.0, "tiny": 5e-324, "neg": -2.5}
    back = unpack_signals(*pack_signals(signals))
    assert back == signals and list(back) == list(signals)   # same values, bit for bit, same order
    assert unpack_signals(*pack_signals({})) == {}


def test_the_fault_hook_fails_every_nth_commit_and_rolls_it_back(tmp_path, monkeypatch) -> None:
    from twin.core.errors import SpecError
    from twin.telemetry.store import FAULT_ENV, Store

    monkeypatch.setenv(FAULT_ENV, "two")
    with pytest.raises(SpecError) as bad:
        Store(tmp_path / "a.sqlite3")
    assert bad.value.field == FAULT_ENV and ">= 1" in str(bad.value)
    monkeypatch.setenv(FAULT_ENV, "2")
    store = Store(tmp_path / "b.sqlite3")
    try:
        store.commit_batch([], [], [], [("j", 1, 1.0)], [])
        with pytest.raises(OSError) as full:
            store.commit_batch([], [], [], [("j", 2, 2.0)], [])
        assert full.value.errno == errno.ENOSPC
        store.commit_batch([], [], [], [("j", 3, 3.0)], [])
        assert store.load_observations() == [("j", 1, 1.0), ("j", 3, 3.0)]  # the failed one rolled back
    finally:
        store.close()


def test_an_unreadable_live_row_leaves_the_records_values_and_is_reported(tmp_path, t0) -> None:
    record, restored = _restart_after(tmp_path, t0, "UPDATE component_live SET vals = x'00ff' WHERE id = ?", CID)
    try:
        comp = restored.live_state()["components"][0]
        assert comp["signals"] == record["signals"] and comp["last_seen_ns"] == record["last_seen_ns"]
        assert [s[:2] for s in restored.store.skipped] == [("component_live", CID)]
    finally:
        restored.close()
