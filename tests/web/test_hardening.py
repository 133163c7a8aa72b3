"""The web view as hard as gRPC (issue 39, items 2, 4 and 7), against a live ``twin serve``.

Found by the last round: ``POST /api/sweeps/load`` turned a 79 KB zstd Parquet file of 10^7 rows
into +2.1 GiB kept (a dict per row), and answered 500 on an int64 overflow; a client that dropped
its body wrote an ERROR traceback; without a token, a page on another loopback origin started a
sweep with a ``text/plain`` ``no-cors`` POST, ``DELETE /api/sweeps/{id}`` stopped anyone's, and
``Host: evil.example`` was answered (DNS rebinding).
"""

from __future__ import annotations

import http.client
import io
import json
import socket
import time
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from tests.server.conftest import ServerProcess
from tests.server.fuzzcases import BASE, rss_mib

MAX_ROWS = 1000  # limits.max_sweep_points of the server below
SPEC = json.dumps({"name": "guarded", "base": BASE, "axes": [{"path": "plan.gbs", "values": [64, 128]}]})


@pytest.fixture(scope="module")
def view(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, str]]:
    tmp = tmp_path_factory.mktemp("web-hardening")
    config = tmp / "serve.yaml"
    config.write_text(yaml.safe_dump({"host": "127.0.0.1", "log_format": "json", "web": {"address": "127.0.0.1:0"},
                                      "limits": {"max_sweep_points": MAX_ROWS},
                                      "telemetry": {"calibrate_interval_s": 0}}))
    srv = ServerProcess(tmp, "--config", str(config))
    serving = srv.wait_log(lambda r: r.get("msg") == "serving")
    yield srv, serving["listeners"]["web"]
    assert srv.stop() == 0, srv.text()[-3000:]


def request(address: str, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
            ) -> tuple[int, dict]:
    """(status, JSON body or {}) of one request; ``Host`` is the address unless ``headers`` says otherwise."""
    host, port = address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        conn.request(method, path, body=body or None, headers=headers or {})
        resp = conn.getresponse()
        data = resp.read()
    finally:
        conn.close()
    try:
        return resp.status, json.loads(data)
    except ValueError:
        return resp.status, {}


def _parquet(rows: int) -> bytes:
    """A zstd Parquet rows file of ``rows`` rows whose columns compress to almost nothing."""
    table = pa.table({"point_id": pa.array(np.zeros(rows, dtype=np.int64)), "feasible": pa.array(np.ones(rows, bool)),
                      "step_time_s": pa.array(np.full(rows, 1.5))})
    out = io.BytesIO()
    pq.write_table(table, out, compression="zstd")
    return out.getvalue()


PAGE = {"X-Twin-Request": "1"}  # what the pages' script sends


# ----------------------------------------------------------------- item 2: rows files bounded
def test_a_huge_rows_file_is_refused_from_its_metadata_before_it_is_expanded(view):
    srv, address = view
    bomb = _parquet(10**7)
    assert len(bomb) < 200_000  # ~80 KB for 10^7 rows
    before = rss_mib(srv.proc.pid)
    status, body = request(address, "POST", "/api/sweeps/load?name=rows.parquet", bomb, PAGE)
    assert status == 429 and body["error"]["code"] == "RESOURCE_EXHAUSTED", body
    assert "10,000,000 rows" in body["error"]["rule"] and "limits.max_sweep_points" in body["error"]["rule"]
    assert rss_mib(srv.proc.pid) < before + 100


@pytest.mark.parametrize(("name", "text"), [
    ("rows.csv", "point_id,feasible\n" + "1,True\n" * (MAX_ROWS + 1)),
    ("rows.jsonl", '{"point_id": 1, "feasible": true}\n' * (MAX_ROWS + 1))])
def test_text_rows_files_are_counted_while_read(view, name, text):
    _srv, address = view
    status, body = request(address, "POST", f"/api/sweeps/load?name={name}", text.encode(), PAGE)
    assert status == 429 and f"more than {MAX_ROWS:,} rows" in body["error"]["rule"], body


def test_a_rows_file_at_the_limit_loads_and_reads_as_columns(view):
    _srv, address = view
    status, body = request(address, "POST", "/api/sweeps/load?name=ok.parquet", _parquet(MAX_ROWS), PAGE)
    assert status == 201 and body["rows"] == MAX_ROWS and body["state"] == "loaded", body
    status, table = request(address, "GET", f"/api/sweeps/{body['id']}?limit=3")
    assert status == 200 and table["rows_total"] == MAX_ROWS and len(table["table"]) == 3
    assert table["table"][0] == {"point_id": 0, "feasible": True, "step_time_s": 1.5}


# ----------------------------------------------------------------- item 7: 4xx, never 500; quiet disconnects
def test_an_integer_beyond_64_bits_is_a_400_naming_the_column(view):
    _srv, address = view
    status, body = request(address, "POST", "/api/sweeps/load?name=rows.csv",
                           f"point_id,feasible,big\n1,True,{2**70}\n".encode(), PAGE)
    assert status == 400 and body["error"]["field"] == "column 'big'" and "beyond 64 bits" in body["error"]["rule"]


def test_a_client_that_drops_its_body_leaves_no_error_in_the_log(view):
    srv, address = view
    host, port = address.rsplit(":", 1)
    for _ in range(3):
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(b"POST /api/sweeps/load?name=rows.csv HTTP/1.1\r\nHost: " + address.encode() +
                         b"\r\nX-Twin-Request: 1\r\nContent-Length: 100000\r\n\r\npoint_id,feasible\n")
    time.sleep(1.0)  # the server notices the closed connections
    assert request(address, "GET", "/api/jobs")[0] == 200
    errors = [r for r in srv.records if str(r.get("level", "")).lower() in ("error", "critical")]
    assert not errors, errors[:2]


# ----------------------------------------------------------------- item 4: CSRF and DNS rebinding
def test_a_cross_origin_simple_post_cannot_start_a_sweep(view):
    _srv, address = view
    other = {"Origin": "http://127.0.0.1:9999", "Content-Type": "text/plain"}
    status, body = request(address, "POST", "/api/sweeps", SPEC.encode(), other)  # fetch(..., {mode: "no-cors"})
    assert status == 403 and body["error"]["field"] == "origin", body
    status, body = request(address, "POST", "/api/sweeps", SPEC.encode(), {"Content-Type": "text/plain"})
    assert status == 403 and body["error"]["field"] == "content-type"  # a form or text post, no Origin
    cross_site = {"Content-Type": "application/json", "Sec-Fetch-Site": "same-site"}
    assert request(address, "POST", "/api/sweeps", SPEC.encode(), cross_site)[1]["error"]["field"] == "origin"
    same = {"Origin": f"http://{address}", "Content-Type": "application/json"}
    status, job = request(address, "POST", "/api/sweeps", SPEC.encode(), same)
    assert status == 202 and job["state"] in ("running", "finished"), job
    assert request(address, "POST", "/api/sweeps", SPEC.encode(), {"Content-Type": "application/yaml"})[0] == 202


def test_delete_needs_the_pages_header_or_a_json_type(view):
    _srv, address = view
    status, job = request(address, "POST", "/api/sweeps", SPEC.encode(), {"Content-Type": "application/json"})
    assert status == 202
    assert request(address, "DELETE", f"/api/sweeps/{job['id']}")[0] == 403
    assert request(address, "DELETE", f"/api/sweeps/{job['id']}", headers={"Origin": "http://evil.example",
                                                                           **PAGE})[0] == 403
    assert request(address, "DELETE", f"/api/sweeps/{job['id']}", headers=PAGE)[0] == 200


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8080", "127.0.0.1.evil.example", ""])
def test_a_host_that_does_not_name_this_server_is_refused(view, host):
    _srv, address = view
    for method, path in (("GET", "/"), ("GET", "/api/jobs"), ("GET", "/static/twin.js")):
        status, body = request(address, method, path, headers={"Host": host})
        assert status == 403, (method, path, status)
    assert body["error"]["field"] == "host"


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "LOCALHOST:1234", "twin.localhost", "[::1]",
                                  socket.gethostname()])
def test_the_servers_own_names_are_answered(view, host):
    _srv, address = view
    assert request(address, "GET", "/api/jobs", headers={"Host": host})[0] == 200
