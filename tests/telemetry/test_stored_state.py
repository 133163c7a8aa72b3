"""Reading state back is robust to whatever is already stored (issue 15, hole 2): rows a
version cannot use are skipped, counted and logged, the rest restored, and every API answers."""

from __future__ import annotations

import json
import sqlite3
import time

from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc as msg

from tests.telemetry.conftest import EXAMPLES
from twin.rpc.v1 import telemetry_pb2 as pb
from twin.telemetry.otlpbuild import request

HUGE_NS = float(2**64 - 1)  # what SQLite keeps of a 2^64-1 timestamp: a REAL


def _seed(srv) -> None:
    t = time.time_ns()
    msg.MetricsServiceStub(srv.channel()).Export(request({"host.name": "node-1"}, [
        ("node_infiniband_state_id", "gauge", [({"device": "mlx5_0", "port": "1"}, 0, t, 4.0),
                                               ({"device": "mlx5_1", "port": "1"}, 0, t, 4.0)]),
        ("twin.training.step_time", "gauge", [({"job": "j"}, 0, t, 1.0)])]), timeout=10)
    srv.api().RegisterJob(pb.RegisterJobRequest(
        job="j", scenario_yaml=(EXAMPLES / "gpt3-175b-dgx-h100-ib.yaml").read_text()), timeout=30)


def test_rows_this_version_cannot_use_are_skipped_and_counted_not_fatal(start_server, tmp_path):
    state = tmp_path / "state"
    first = start_server(state_dir=state)
    _seed(first)
    first.stop()
    db = sqlite3.connect(state / "telemetry.sqlite3")
    ids = [cid for (cid,) in db.execute("SELECT id FROM components ORDER BY id")]
    bad_port = next(c for c in ids if "mlx5_0" in c)
    record = json.loads(db.execute("SELECT data FROM components WHERE id = ?", (bad_port,)).fetchone()[0])
    record.update(last_seen_ns=HUGE_NS, peaks={"x": "NaN"})
    db.execute("UPDATE components SET data = ? WHERE id = ?", (json.dumps(record), bad_port))
    db.execute("INSERT INTO components VALUES ('node-9/ib_port:mlx5_0/1', 'not json')")
    db.execute("INSERT INTO components VALUES ('node-8/ib_port:mlx5_0/1', '{\"kind\": 5}')")
    db.execute("INSERT INTO events (time_ns, component, old, new, why) VALUES (?, 'x', 'up', 'down', 'y')",
               (HUGE_NS,))
    db.execute("INSERT INTO observations VALUES ('j', ?, 2.0)", (HUGE_NS,))
    db.execute("INSERT INTO observations VALUES ('j', 5, 'NaN')")
    db.execute("INSERT INTO series VALUES ('garbage', ?, -5, 1.0, NULL)", (HUGE_NS,))
    db.execute("INSERT INTO jobs VALUES ('broken', '{{{', 0)")
    db.commit()
    db.close()

    again = start_server(state_dir=state)
    live = again.state()
    assert live.ingest.stored_rows_skipped == 8
    restored = {c.id for c in live.components}
    assert bad_port not in restored and "node-9/ib_port:mlx5_0/1" not in restored
    assert set(ids) - {bad_port} <= restored                     # the good rows are all back
    div = again.api().GetDivergence(pb.GetDivergenceRequest(), timeout=30)
    assert [(j.job, j.observed_step_time_s) for j in div.jobs] == [("j", 1.0)]
    assert again.api().PredictLive(pb.PredictLiveRequest(job="j"), timeout=30).designed_step_time_s > 0
    # The rows stay in the database for whoever inspects it (nothing silently deleted).
    db = sqlite3.connect(state / "telemetry.sqlite3")
    assert db.execute("SELECT COUNT(*) FROM components WHERE id = 'node-9/ib_port:mlx5_0/1'").fetchone()[0] == 1
    db.close()


def test_a_corrupted_database_is_reported_through_get_live_state(start_server, tmp_path):
    """Hole 9: the move-aside is visible to an operator over the API, not only in the log."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "telemetry.sqlite3").write_bytes(b"this is not a database" * 100)
    srv = start_server(state_dir=state)
    moved = srv.state().database_moved_aside
    assert moved.startswith(str(state / "telemetry.sqlite3.corrupt-"))
    assert (state / moved.rsplit("/", 1)[1]).read_bytes().startswith(b"this is not a database")
    clean = start_server(state_dir=tmp_path / "other")
    assert clean.state().database_moved_aside == ""
