"""Every OTLP/HTTP and remote-write input bounded before it is expanded (issue 39, items 3 and 6).

Found by the last round: 240,000 empty gzip members (4.8 MB) cost 47 s of CPU and were answered
200; a 2.5 MB remote-write request of 5,000 series, 152 of them with 100-2,005 labels, cost
8.4 s of CPU; nothing bounded the labels or series of a request. Each bound answers a 4xx or a
retryable 503/504 naming what was exceeded; the receiver keeps serving.
"""

from __future__ import annotations

import gzip
import http.client
import socket
import time

import cramjam
import pytest

from tests.telemetry.test_otlp_http import PROTO, call, ib_request, status_of
from tests.telemetry.test_remote_write import HEADERS, body, ib_state, now_ms, series
from twin.engine import Engine
from twin.rpc.prompb import remote_pb2
from twin.telemetry import remote_write
from twin.telemetry.httpbase import HttpError
from twin.telemetry.otlp_http import (
    MAX_GZIP_MEMBERS,
    MAX_INFLATE_RATIO,
    MAX_JSON_BYTES,
    PATH,
    HttpSettings,
    OtlpHttpReceiver,
    inflate,
)
from twin.telemetry.service import TelemetryService
from twin.telemetry.telemetry_config import TelemetryConfig

MIB = 1 << 20


@pytest.fixture
def receiver(tmp_path):
    svc = TelemetryService(Engine(autoload=False), TelemetryConfig(state_dir=tmp_path, calibrate_interval_s=0))
    rec = OtlpHttpReceiver(svc, "127.0.0.1", 0, HttpSettings(max_receive_bytes=16 * MIB,
                                                             max_inflight_bytes=4 * MIB))
    yield svc, rec
    rec.stop()
    svc.close()


def _gzip(data: bytes, headers: dict | None = None) -> tuple[bytes, dict]:
    return data, {"Content-Type": PROTO, "Content-Encoding": "gzip", **(headers or {})}


def test_gzip_members_are_bounded(receiver):
    _svc, rec = receiver
    good = ib_request().SerializeToString()
    # A few members (concatenated gzip files) are one body, as RFC 1952 has it.
    parts = [gzip.compress(good[:10]), gzip.compress(good[10:])] + [gzip.compress(b"")] * (MAX_GZIP_MEMBERS - 2)
    status, _, answer = call(rec.address, *_gzip(b"".join(parts)))
    assert status == 200, status_of(answer)
    # 20,000 empty members (400 KB): refused at the first member past the bound, 400 naming it.
    status, _, answer = call(rec.address, *_gzip(gzip.compress(b"") * 20_000))
    assert status == 400 and f"more than {MAX_GZIP_MEMBERS} gzip members" in status_of(answer).message


def test_a_gzip_bomb_is_refused_by_its_ratio_before_the_size_limit(receiver):
    _svc, rec = receiver
    bomb = gzip.compress(b"\0" * (8 * MIB))  # 8 KB that inflates 1,000x: under the 16 MiB limit
    status, _, answer = call(rec.address, *_gzip(bomb))
    assert status == 413 and f"more than {MAX_INFLATE_RATIO} times its size" in status_of(answer).message


def test_inflate_is_linear_in_its_members_and_exact():
    members = [gzip.compress(bytes([i]) * 1000) for i in range(MAX_GZIP_MEMBERS)]
    assert inflate(b"".join(members), 1 << 20) == b"".join(bytes([i]) * 1000 for i in range(MAX_GZIP_MEMBERS))
    with pytest.raises(HttpError, match="truncated"):
        inflate(gzip.compress(b"x" * 100)[:-4], 1 << 20)
    with pytest.raises(HttpError, match="not valid gzip"):
        inflate(gzip.compress(b"x") + b"trailing garbage", 1 << 20)


def test_a_json_body_is_bounded_below_the_receive_limit(receiver):
    _svc, rec = receiver
    # Refused on its Content-Length, before a byte of it is read.
    status, _, answer = call(rec.address, b"{}", {"Content-Type": "application/json",
                                                  "Content-Length": str(MAX_JSON_BYTES + 1)})
    assert status == 413
    message = status_of(answer, "application/json").message
    assert f"of {MAX_JSON_BYTES} bytes" in message and "OTLP/JSON limit" in message


def test_bodies_held_at_once_are_bounded_and_a_refusal_is_retryable(receiver):
    _svc, rec = receiver
    host, port = rec.address.rsplit(":", 1)
    slow = socket.create_connection((host, int(port)), timeout=30)
    try:
        # A client that announced 3 MiB and sends it slowly holds 3 of the 4 MiB in flight.
        slow.sendall(f"POST {PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: {PROTO}\r\n"
                     f"Content-Length: {3 * MIB}\r\n\r\n".encode() + b"\0" * 1024)
        deadline = time.monotonic() + 10
        while rec._server.budget.used < 3 * MIB and time.monotonic() < deadline:  # the receiver's own count
            time.sleep(0.01)
        status, headers, answer = call(rec.address, b"\0" * (2 * MIB), {"Content-Type": PROTO})
        assert status == 503 and headers["retry-after"] == "1"
        assert "max in flight" in status_of(answer).message
        assert call(rec.address, ib_request().SerializeToString(), {"Content-Type": PROTO})[0] == 200  # small: fits
    finally:
        slow.close()
    deadline = time.monotonic() + 10
    while rec._server.budget.used and time.monotonic() < deadline:  # released when it ends
        time.sleep(0.01)
    assert rec._server.budget.used == 0


def _labelled(extra: dict[str, str]) -> remote_pb2.WriteRequest:
    ts = ib_state("mlx5_7", 4.0)
    for name, value in extra.items():
        ts.labels.add(name=name, value=value)
    return ts


def test_remote_write_labels_per_series_and_their_lengths_are_bounded(receiver):
    svc, rec = receiver
    # ib_state's series has 5 labels (__name__, device, port, instance, job).
    many = {f"extra_{i:02d}": "v" for i in range(remote_write.MAX_LABELS - 4)}
    cases = [(many, f"more than {remote_write.MAX_LABELS} labels"),
             ({"long": "v" * (remote_write.MAX_LABEL_VALUE + 1)}, "label value longer than 2048 characters"),
             ({"n" * (remote_write.MAX_LABEL_NAME + 1): "v"}, "label name longer than 1024 characters")]
    for extra, reason in cases:
        bad = _labelled(extra)
        status, _, text = rec_call(rec, body(ib_state("mlx5_0", 4.0), bad))
        assert status == 400 and "1 sample(s) refused, the rest applied" in text and reason in text, text
    assert "node-1/ib_port:mlx5_0/1" in svc.state.components
    assert not any("mlx5_7" in cid for cid in svc.state.components)
    at_bound = _labelled(dict(list(many.items())[:-1]))  # exactly MAX_LABELS: applied
    assert len(at_bound.labels) == remote_write.MAX_LABELS
    assert rec_call(rec, body(at_bound))[0] == 204


def test_remote_write_series_and_samples_per_request_are_bounded(receiver):
    _svc, rec = receiver
    many = remote_pb2.WriteRequest()
    for i in range(remote_write.MAX_SERIES + 1):
        ts = many.timeseries.add()
        ts.labels.add(name="__name__", value="up")
        ts.labels.add(name="i", value=str(i))
    status, _, text = rec_call(rec, bytes(cramjam.snappy.compress_raw(many.SerializeToString())))
    assert status == 413 and f"at most {remote_write.MAX_SERIES:,}" in text and "max_samples_per_send" in text
    dense = series("up", {}, [(1.0, now_ms() - i) for i in range(remote_write.MAX_SAMPLES + 1)])
    status, _, text = rec_call(rec, body(dense))
    assert status == 413 and f"samples in one request; at most {remote_write.MAX_SAMPLES:,}" in text


def test_remote_write_conversion_stops_at_its_deadline(receiver):
    svc, _rec = receiver
    raw = remote_pb2.WriteRequest(timeseries=[ib_state(f"mlx5_{i}", 4.0) for i in range(10)]).SerializeToString()
    with pytest.raises(HttpError) as err:
        remote_write.write(svc, raw, timeout=-1.0)  # already past
    assert err.value.status == 504 and "deadline" in str(err.value)
    assert remote_write.write(svc, raw, timeout=30.0).status == 204
    assert len(svc.state.components) == 10


def rec_call(rec: OtlpHttpReceiver, data: bytes) -> tuple[int, dict, str]:
    host, port = rec.address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        conn.request("POST", remote_write.PATH, body=data, headers=HEADERS)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read().decode()
    finally:
        conn.close()


def test_a_refused_body_is_drained_so_the_client_reads_the_answer(tmp_path):
    """A request refused before its body is read (413 on its Content-Length) while the client is
    still sending that body: the receiver reads and drops the rest before closing, so the client
    gets the 413 instead of a connection reset (closing with unread data resets the connection,
    RFC 1122 4.2.2.13; the 503 of a bounded in-flight budget was lost that way under load)."""
    svc = TelemetryService(Engine(autoload=False), TelemetryConfig(state_dir=tmp_path, calibrate_interval_s=0))
    rec = OtlpHttpReceiver(svc, "127.0.0.1", 0, HttpSettings(max_receive_bytes=MIB))
    host, port = rec.address.rsplit(":", 1)
    size = 8 * MIB
    try:
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(f"POST {PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: {PROTO}\r\n"
                         f"Content-Length: {size}\r\n\r\n".encode())
            sock.sendall(b"\0" * size)  # the whole body, as a client that does not read early answers does
            answer = b""
            while b"\r\n\r\n" not in answer:
                chunk = sock.recv(65536)
                assert chunk, answer
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 413 ") and b"Connection: close" in answer
    finally:
        rec.stop()
        svc.close()
