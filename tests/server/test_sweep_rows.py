"""Sweep rows in chunks over a real server on 127.0.0.1: every row exactly once, in order,
equal to the sweep evaluated in this process, whatever the chunk size, the row width or the client.
"""

from __future__ import annotations

import json
import time

import grpc
import pytest

from tests.server.test_errors import bad_field
from tests.server.test_node_client import nodejs  # noqa: F401 - the fixture
from twin.client import TwinClient, event_rows
from twin.engine import Engine
from twin.rpc.v1 import sweep_service_pb2 as sw
from twin.rpc.v1 import sweep_service_pb2_grpc as sw_grpc
from twin.server import extensions, grpc_app, sweep_events
from twin.server.rowchunks import DEFAULT_ROWS_PER_MESSAGE, MAX_CHUNK_BYTES, MAX_ROWS_PER_MESSAGE
from twin.server.server_config import ServerConfig
from twin.server.services import event_message
from twin.server.sweep_engine import EngineRunner

BASE = {"name": "base", "cluster": {"system": "DGX-H100", "num_gpus": 256}, "model": "llama3.1-70b",
        "plan": {"tp": 8, "pp": 4, "gbs": 256}}
# 80 x 2 x 3 x 10 = 4,800 points, feasible and infeasible ones mixed: two of the runner's
# 4,096-point row batches, so chunks meet progress events mid-stream.
SPEC = {"name": "rows", "base": BASE, "keep_rows": True, "axes": [
    {"path": "plan.gbs", "range": {"start": 256, "stop": 256 * 81, "step": 256}},
    {"path": "plan.mbs", "values": [1, 2]},
    {"path": "plan.recompute", "values": ["none", "selective", "full"]},
    {"path": "plan.pp", "values": [1, 2, 4, 5, 8, 10, 16, 20, 40, 80]}]}
# 600 rows of ~10 KB (a long cluster name as an axis): 500 of them, one batch, are ~5 MB,
# over a stock client's 4 MiB receive limit were they one message.
WIDE = {"name": "wide", "base": BASE, "keep_rows": True,
        "axes": [{"path": "cluster.name", "values": [f"c{i}-" + "x" * 10_000 for i in range(600)]}]}


def local_rows(spec: dict) -> list[bytes]:
    """The rows of the sweep evaluated in this process, each built field by field from its own
    estimate (``event_message``: the slow path the server's block encoding must equal).
    """
    runner = EngineRunner(Engine(autoload=False), max_points=1_000_000, executor="inline")
    out = []
    for e in runner(spec, lambda: False):
        for row in (e.rows() if isinstance(e, sweep_events.RowBlock) else [e] if isinstance(e, sweep_events.Row)
                    else []):
            out.append(event_message(row).row.SerializeToString(deterministic=True))
    return out


@pytest.fixture(scope="module")
def expected() -> list[bytes]:
    return local_rows(SPEC)


def check_stream(events: list[sw.SweepEvent], expected: list[bytes], per_message: int) -> None:
    kinds = [e.WhichOneof("event") for e in events]
    assert kinds[0] == "started" and kinds[-1] == "finished" and kinds.count("finished") == 1
    rows = [r.SerializeToString(deterministic=True) for e in events for r in event_rows(e)]
    assert rows == expected  # every row exactly once, in the sweep's order, equal to the local evaluation
    chunks = [e for e in events if event_rows(e)]
    if per_message == 1:
        assert {e.WhichOneof("event") for e in chunks} == {"row"}
    else:
        assert {e.WhichOneof("event") for e in chunks} == {"rows"}
        assert max(len(e.rows.rows) for e in chunks) <= (per_message or DEFAULT_ROWS_PER_MESSAGE)
    # Rows are flushed before each progress event: a client has every row a progress event counts.
    seen = 0
    for e in events:
        seen += len(event_rows(e))
        if e.HasField("progress"):
            assert seen == e.progress.done_points


@pytest.mark.parametrize("per_message", [0, 1, 7, MAX_ROWS_PER_MESSAGE])
def test_python_client_gets_every_row_once_in_order(server, expected, per_message):
    with TwinClient(server.address) as client:
        events = list(client.sweep(SPEC, rows_per_message=per_message, timeout_s=120))
    check_stream(events, expected, per_message)
    assert events[-1].finished.done_points == len(expected) == 4800


def test_wide_rows_stay_under_a_stock_clients_limit(server):
    want = local_rows(WIDE)
    # A channel with gRPC's defaults: a 4 MiB receive limit.
    with grpc.insecure_channel(server.address) as channel:
        request = sw.SweepRequest(spec_document=json.dumps(WIDE), rows_per_message=MAX_ROWS_PER_MESSAGE)
        events = list(sw_grpc.SweepServiceStub(channel).Sweep(request, timeout=120))
    check_stream(events, want, MAX_ROWS_PER_MESSAGE)
    chunks = [e for e in events if e.HasField("rows")]
    assert all(e.rows.ByteSize() <= MAX_CHUNK_BYTES for e in chunks)
    assert len(chunks) >= 5  # ~6 MB of rows in chunks of at most 1 MiB


@pytest.mark.parametrize("value", [-1, MAX_ROWS_PER_MESSAGE + 1])
def test_bad_rows_per_message_is_invalid_argument_naming_it(sweep_stub, value):
    request = sw.SweepRequest(spec_document=json.dumps(SPEC), rows_per_message=value)
    with pytest.raises(grpc.RpcError) as info:
        list(sweep_stub.Sweep(request, timeout=10))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_field(info.value) == "rows_per_message"
    assert f"between 1 and {MAX_ROWS_PER_MESSAGE}" in info.value.details()


@pytest.mark.parametrize("per_message", ["0", "1"])
def test_node_client_reads_every_row(server, expected, nodejs, tmp_path, per_message):  # noqa: F811
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(SPEC))
    out = nodejs.run("sweep.js", server.address, str(spec_file), per_message, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    want = [sw.SweepRow.FromString(b) for b in expected]
    assert [r["index"] for r in got["rows"]] == [r.index for r in want]
    assert [r["outcome"] for r in got["rows"]] == [r.WhichOneof("outcome") for r in want]
    assert [r.get("step_time_s") for r in got["rows"]] == [
        r.estimate.step_time_s if r.HasField("estimate") else None for r in want]
    assert [r.get("error", {}).get("field") for r in got["rows"]] == [
        r.error.field if r.HasField("error") else None for r in want]
    assert ("row" in got["messages"]) is (per_message == "1") and ("rows" in got["messages"]) is (per_message == "0")
    assert got["finished"]["done_points"] == 4800


# --------------------------------------------------------------- the time bound, end to end
class SlowRunner:
    """A sweep runner (an extension's, say) that yields a row every 0.1 s and nothing between."""

    def __call__(self, data, should_stop):
        yield sweep_events.Started("slow", 6, ("plan.tp",))
        for i in range(6):
            time.sleep(0.1)
            yield sweep_events.Row(i, {"plan.tp": i})
        yield sweep_events.Finished(6, 0, 0.6, "step_time_s", ())


def test_a_slow_sweep_streams_rows_before_it_ends(tmp_path, engine, monkeypatch):
    """Asking for 4096 rows a message does not hold a slow sweep's rows to the end: the first
    chunk goes out once its first row has waited 0.25 s (the rows span at least 0.5 s)."""

    def install(server, ctx) -> None:
        ctx.sweep_runner = SlowRunner()

    monkeypatch.setattr(extensions, "EXTENSIONS", [*extensions.EXTENSIONS, install])
    running = grpc_app.build_server(ServerConfig(port=0, state_dir=str(tmp_path / "state"), plugins_autoload=False,
                                            grace_s=1.0, workers=4), engine)
    grpc_app.start(running)
    try:
        with grpc.insecure_channel(running.address) as channel:
            request = sw.SweepRequest(spec_document=json.dumps(SPEC), rows_per_message=MAX_ROWS_PER_MESSAGE)
            events = list(sw_grpc.SweepServiceStub(channel).Sweep(request, timeout=30))
    finally:
        grpc_app.stop(running)
    chunks = [[r.index for r in e.rows.rows] for e in events if e.HasField("rows")]
    assert len(chunks) >= 2 and [i for c in chunks for i in c] == list(range(6))
    assert events[-1].HasField("finished")
