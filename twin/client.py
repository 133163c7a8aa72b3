"""A small Python client for a running twin server (``twin serve``).

    from twin.client import TwinClient, event_rows
    with TwinClient("127.0.0.1:50051") as twin:
        est = twin.predict("examples/gpt3-175b-dgx-h100-ib.yaml")   # or a mapping
        print(est.step_time_s, est.memory.fits)
        for event in twin.sweep("examples/sweeps/fabrics-and-plans.yaml"):
            for row in event_rows(event):      # rows come many to a message, in order
                print(row.index, row.estimate.step_time_s if row.HasField("estimate") else row.error.field)

Scenarios go over the wire as structured messages (converted from the scenario-file
mapping on this side, so a typo is reported before anything is sent). A failed call
raises the same domain error a local evaluation would (``SpecError`` naming the field,
``NotFoundError``, ...), or :class:`~twin.wire.status_table.RemoteError` for transport and
server failures.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import grpc

from twin.core.errors import SpecError
from twin.core.estimate import Estimate
from twin.core.scenario_io import read_mapping
from twin.rpc.v1 import catalog_pb2, sweep_service_pb2, twin_service_pb2, twin_service_pb2_grpc
from twin.rpc.v1 import sweep_service_pb2_grpc as sweep_grpc
from twin.wire.convert import estimate_from_message, scenario_from_mapping
from twin.wire.status_table import RemoteError, error_from_rpc

TOKEN_ENV = "TWIN_AUTH_TOKEN"
__all__ = ["RemoteError", "TwinClient", "event_rows"]


def event_rows(event: sweep_service_pb2.SweepEvent) -> Sequence[sweep_service_pb2.SweepRow]:
    """The rows one sweep event carries, in order: a ``rows`` chunk's, the deprecated single
    ``row`` (a request with ``rows_per_message=1``), or none (started, progress, finished).
    """
    kind = event.WhichOneof("event")
    if kind == "rows":
        return event.rows.rows
    if kind == "row":
        return (event.row,)
    return ()


def _read(path: str | None) -> bytes | None:
    if not path:
        return None
    try:
        return Path(path).read_bytes()
    except OSError as err:
        raise SpecError(str(path), f"cannot read file: {err.strerror or err}") from err


class TwinClient:
    """A connection to one twin server.

    ``token``: bearer token (default: ``$TWIN_AUTH_TOKEN``); ``ca_file``: PEM CA to trust
    (turns TLS on); ``cert_file``/``key_file``: client certificate for mutual TLS;
    ``server_name``: name to check the server certificate against (default: the host);
    ``timeout_s``: deadline of each call.
    """

    def __init__(self, address: str, *, token: str | None = None, ca_file: str | None = None,
                 cert_file: str | None = None, key_file: str | None = None, server_name: str | None = None,
                 timeout_s: float = 30.0, tls: bool | None = None) -> None:
        self.address = address
        self.timeout_s = timeout_s
        token = token if token is not None else os.environ.get(TOKEN_ENV) or None
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        options: list[tuple[str, Any]] = [("grpc.max_receive_message_length", 64 * 1024 * 1024)]
        if server_name:
            options.append(("grpc.ssl_target_name_override", server_name))
        use_tls = tls if tls is not None else bool(ca_file or cert_file)
        if use_tls:
            creds = grpc.ssl_channel_credentials(root_certificates=_read(ca_file), private_key=_read(key_file),
                                                 certificate_chain=_read(cert_file))
            self.channel = grpc.secure_channel(address, creds, options=options)
        else:
            self.channel = grpc.insecure_channel(address, options=options)
        self.twin = twin_service_pb2_grpc.TwinServiceStub(self.channel)
        self.sweeps = sweep_grpc.SweepServiceStub(self.channel)

    # ------------------------------------------------------------------ plumbing
    def __enter__(self) -> TwinClient:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Close the channel."""
        self.channel.close()

    def _call(self, method: Any, request: Any, timeout_s: float | None = None) -> Any:
        try:
            return method(request, timeout=timeout_s or self.timeout_s, metadata=self._metadata)
        except grpc.RpcError as err:
            raise error_from_rpc(err) from None

    @staticmethod
    def _scenario(scenario: Mapping[str, Any] | str | Path) -> Any:
        data = read_mapping(scenario) if isinstance(scenario, str | Path) else scenario
        return scenario_from_mapping(data)

    # ------------------------------------------------------------------ the API
    def predict(self, scenario: Mapping[str, Any] | str | Path, *, require_fit: bool = False) -> Estimate:
        """Predict one training step of a scenario (a mapping or a scenario file path)."""
        request = twin_service_pb2.PredictRequest(scenario=self._scenario(scenario), require_fit=require_fit)
        return estimate_from_message(self._call(self.twin.Predict, request).estimate)

    def validate(self, scenario: Mapping[str, Any] | str | Path) -> twin_service_pb2.ValidateResponse:
        """Check a scenario on the server; the response lists violations or the resolved scenario."""
        return self._call(self.twin.Validate, twin_service_pb2.ValidateRequest(scenario=self._scenario(scenario)))

    def catalog(self) -> catalog_pb2.Catalog:
        """The server's presets, fabrics, strategies and plugins."""
        return self._call(self.twin.GetCatalog, twin_service_pb2.GetCatalogRequest()).catalog

    def sweep(self, spec: Mapping[str, Any] | str | Path, *, timeout_s: float | None = None,
              rows_per_message: int = 0) -> Iterator[sweep_service_pb2.SweepEvent]:
        """Run a sweep (a sweep mapping or file); yields events as the server sends them.

        Rows come many to an event: read them with :func:`event_rows`. ``rows_per_message``
        caps the rows of one event (1 to 4096; 0: the server's default; 1: the deprecated
        one-row ``row`` events). Closing the iterator early (``break``) cancels the call,
        and the server stops.
        """
        data = read_mapping(spec) if isinstance(spec, str | Path) else spec
        request = sweep_service_pb2.SweepRequest(spec_document=json.dumps(data), rows_per_message=rows_per_message)
        call = self.sweeps.Sweep(request, timeout=timeout_s, metadata=self._metadata)
        try:
            yield from call
        except grpc.RpcError as err:
            raise error_from_rpc(err) from None
        finally:
            call.cancel()

    def ignored_metrics(self) -> list[dict[str, Any]]:
        """Metrics the server received and does not read, per name and exporter."""
        from twin.rpc.v1 import telemetry_pb2, telemetry_pb2_grpc

        stub = telemetry_pb2_grpc.TelemetryServiceStub(self.channel)
        resp = self._call(stub.GetIgnoredMetrics, telemetry_pb2.GetIgnoredMetricsRequest())
        return [{"name": m.name, "exporter": m.exporter, "points": m.points, "reason": m.reason,
                 "first_seen_unix_nano": m.first_seen_unix_nano, "last_seen_unix_nano": m.last_seen_unix_nano}
                for m in resp.metrics]

    def component_states(self) -> dict[str, int]:
        """How many live components the server tracks in each state (every page read)."""
        from twin.rpc.v1 import telemetry_pb2, telemetry_pb2_grpc

        stub = telemetry_pb2_grpc.TelemetryServiceStub(self.channel)
        counts: dict[str, int] = {}
        token = ""
        while True:
            page = self._call(stub.GetLiveState, telemetry_pb2.GetLiveStateRequest(max_events=0, page_token=token))
            for c in page.components:
                name = telemetry_pb2.ComponentState.Name(c.state).removeprefix("COMPONENT_STATE_").lower()
                counts[name] = counts.get(name, 0) + 1
            token = page.next_page_token
            if not token:
                return counts

    def unplaced_hosts(self) -> list[str]:
        """Hosts reporting telemetry that no registered job's placement owns."""
        from twin.rpc.v1 import telemetry_pb2, telemetry_pb2_grpc

        stub = telemetry_pb2_grpc.TelemetryServiceStub(self.channel)
        page = self._call(stub.GetLiveState, telemetry_pb2.GetLiveStateRequest(max_events=0, page_size=1))
        return list(page.unplaced_hosts)

    def health(self, service: str = "", timeout_s: float = 5.0) -> str:
        """The server's health status name for ``service`` ("" = the whole server)."""
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        stub = health_pb2_grpc.HealthStub(self.channel)
        try:
            response = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout_s)
        except grpc.RpcError as err:
            raise RemoteError(err.code(), err.details() or "") from None
        return health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)


def client_from_env(address: str, **kwargs: Any) -> TwinClient:
    """A client whose TLS files come from TWIN_CLIENT_CA_FILE / _CERT_FILE / _KEY_FILE when not given."""
    for key, env in (("ca_file", "TWIN_CLIENT_CA_FILE"), ("cert_file", "TWIN_CLIENT_CERT_FILE"),
                     ("key_file", "TWIN_CLIENT_KEY_FILE")):
        kwargs.setdefault(key, os.environ.get(env) or None)
    return TwinClient(address, **kwargs)
