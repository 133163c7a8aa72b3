"""Server configuration: defaults, then a YAML/JSON file, then ``TWIN_*`` env vars, then flags.

Every key has an environment variable: top-level keys ``TWIN_<KEY>``, section keys
``TWIN_<SECTION>_<KEY>`` (``limits.max_sweep_points`` -> ``TWIN_LIMITS_MAX_SWEEP_POINTS``).
The file is checked as strictly as a scenario: unknown keys and wrong types are errors
naming the key. A config file looks like::

    host: 127.0.0.1
    port: 50051
    state_dir: /var/lib/twin
    tls: {cert_file: /etc/twin/tls.crt, key_file: /etc/twin/tls.key, client_ca_file: /etc/twin/ca.crt}
    auth: {token_file: /etc/twin/token}
    limits: {max_sweep_points: 100000, max_message_bytes: 67108864}
"""

from __future__ import annotations

import dataclasses
import os
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twin.core import schema
from twin.core.errors import SpecError
from twin.core.scenario_io import read_mapping
from twin.core.schema import spec_field

ENV_PREFIX = "TWIN_"
DEFAULT_PORT = 50051  # the customary gRPC port (grpc.io examples, grpcurl docs)
OTLP_HTTP_PORT = 4318  # the OTLP/HTTP default port (OTLP specification, "OTLP/HTTP Default Port")
WEB_PORT = 8080  # the web view's default port: IANA's registered alternative HTTP port ("http-alt", 8080/tcp)


@dataclass(frozen=True, slots=True)
class TlsConfig:
    """TLS: server certificate and key (PEM); a client CA turns on mutual TLS."""

    cert_file: str = ""
    key_file: str = ""
    client_ca_file: str = spec_field("", doc="PEM CA bundle; set: clients must present a certificate it signed")

    @property
    def enabled(self) -> bool:
        """Whether the server listens with TLS."""
        return bool(self.cert_file or self.key_file)

    @property
    def mutual(self) -> bool:
        """Whether client certificates are required."""
        return bool(self.client_ca_file)


@dataclass(frozen=True, slots=True)
class AuthConfig:
    """Bearer-token auth: the token comes from a file, or from the env var named here."""

    token_file: str = ""
    token_env: str = "TWIN_AUTH_TOKEN"


@dataclass(frozen=True, slots=True)
class LimitsConfig:
    """Bounds on requests. Over a bound: RESOURCE_EXHAUSTED naming the field."""

    # gRPC's own default receive limit is 4 MiB (grpc/impl/channel_arg_names.h); keep it.
    # OTLP batches from a Collector exceed gRPC's 4 MiB default; 64 MiB as OTLP receivers allow.
    max_message_bytes: int = spec_field(64 * 1024 * 1024, ge=1024)
    max_sweep_points: int = spec_field(100_000, ge=1)
    max_list_items: int = spec_field(4096, ge=1, doc="entries of any repeated field, map or Struct")
    # The largest published training clusters are ~10^5 GPUs (xAI Colossus 100k-200k H100,
    # Meta 2x24k); 10^7 leaves two orders of magnitude of what-if room.
    max_num_gpus: int = spec_field(10_000_000, ge=1)
    max_concurrent_rpcs: int = spec_field(256, ge=1, doc="further calls get RESOURCE_EXHAUSTED at once")
    # Measured (benchmarks/bench_server.py, closed loop, 2 cores): ~1,000 Predict/s, so 32
    # waiting calls are ~30 ms of queue; past that a call is refused with a retry hint.
    max_queued_rpcs: int = spec_field(
        32, ge=1, le=100_000, doc="unary calls waiting for a worker or, in gRPC core, to be accepted; more "
                                  "get RESOURCE_EXHAUSTED with RetryInfo at once, and every unary call does "
                                  "until the queue is down to a quarter (Health and reflection are never refused); "
                                  "also the OTLP/HTTP and remote-write requests waiting for one of `workers` "
                                  "(more get 503 with Retry-After at once)")
    # The model's work is Python under one GIL: more threads only make the accepting thread wait
    # longer for the GIL, which is what a refusal past capacity costs (twin.server.admission).
    model_workers: int = spec_field(
        1, ge=1, le=1024, doc="threads running Predict and Validate; the other calls, the long model calls "
                              "among them, run on the server's workers")
    max_sweep_streams: int = spec_field(
        4, ge=1, le=100_000, doc="open Sweep streams; more get RESOURCE_EXHAUSTED (at most workers - 1, so "
                                 "unary calls and Health always have a worker)")


@dataclass(frozen=True, slots=True)
class OtelConfig:
    """The service's own traces and metrics (OTEL_* env vars pick the exporter)."""

    enabled: bool = False


@dataclass(frozen=True, slots=True)
class WebConfig:
    """The web view (``twin.web``): its own HTTP port, the main port's token and TLS."""

    enabled: bool = spec_field(True, doc="serve the web view (twin serve --no-web: off)")
    address: str = spec_field(
        "", doc=f"host:port of the web view; empty: the server's host and port {WEB_PORT} (a free port when "
                "that one is taken, or when port is 0, so a server asked for a free port never clashes); "
                "port 0: a free port")
    allowed_hosts: tuple[str, ...] = spec_field(
        (), doc="names the view answers to beyond IP addresses, localhost and this machine's name (what a "
                "proxy or DNS calls it); only without a token is the Host header checked (DNS rebinding)")


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """Everything ``twin serve`` needs."""

    host: str = "127.0.0.1"
    port: int = spec_field(DEFAULT_PORT, ge=0, le=65535, doc="0: pick a free port")
    health_port: int = spec_field(0, ge=0, le=65535, doc="extra plaintext port serving only Health; 0: off")
    otlp_http_port: int | None = spec_field(
        None, ge=0, le=65535, doc=f"OTLP/HTTP receiver (POST /v1/metrics) on host:this port, e.g. {OTLP_HTTP_PORT} "
                                  "(the OTLP default); 0: a free port; unset: off")
    state_dir: str = spec_field("state", doc="local state (calibration, telemetry); created if missing")
    workers: int = spec_field(8, ge=1, le=1024, doc="RPC worker threads; also the OTLP/HTTP and remote-write "
                                                    "requests served at once")
    grace_s: float = spec_field(10.0, ge=0, doc="time in-flight calls get to finish on shutdown")
    drain_s: float = spec_field(0.0, ge=0, doc="NOT_SERVING before the listener closes (probes notice)")
    log_level: str = "INFO"
    log_format: typing.Literal["json", "text"] = "json"
    plugins_autoload: bool = True
    scenario_cache: int = spec_field(1024, ge=0, doc="checked scenarios and Predict answers kept for repeats; 0: off")
    tls: TlsConfig = field(default_factory=TlsConfig)
    auth: AuthConfig = field(default_factory=AuthConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    otel: OtelConfig = field(default_factory=OtelConfig)
    web: WebConfig = field(default_factory=WebConfig)
    telemetry: dict[str, typing.Any] = field(
        default_factory=dict,
        metadata={"doc": "OTLP ingest settings (twin.telemetry.telemetry_config.TelemetryConfig fields)"})

    @property
    def state_path(self) -> Path:
        """The state directory as a path."""
        return Path(self.state_dir)

    @property
    def address(self) -> str:
        """``host:port`` as gRPC wants it (IPv6 literals bracketed)."""
        host = f"[{self.host}]" if ":" in self.host and not self.host.startswith("[") else self.host
        return f"{host}:{self.port}"

    @property
    def web_bind(self) -> tuple[str, int]:
        """(host, port) the web view binds: ``web.address``, or the default it stands for when empty."""
        if not self.web.address:
            return self.host.strip("[]"), WEB_PORT if self.port else 0
        return parse_host_port(self.web.address, "config.web.address")


def parse_host_port(text: str, key: str) -> tuple[str, int]:
    """``host:port`` (IPv6 in brackets) as (host, port); errors name ``key``."""
    host, sep, port = text.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise SpecError(key, f"must be host:port with a port in 0..65535, e.g. 127.0.0.1:{WEB_PORT} (got {text!r})")
    return host, int(port)


def _coerce(text: str, tp: Any, key: str) -> Any:
    """An env var's text as the field's type (the schema loader then checks bounds); for an
    optional field, empty text is None.
    """
    base = tp
    args = typing.get_args(tp)
    if type(None) in args:
        if not text.strip():
            return None
        base = next(a for a in args if a is not type(None))
    if base is bool:
        low = text.strip().lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off", ""):
            return False
        raise SpecError(key, f"must be a boolean (got {text!r})")
    if base is int:
        try:
            return int(text.strip())
        except ValueError as err:
            raise SpecError(key, f"must be an integer (got {text!r})") from err
    if base is float:
        try:
            return float(text.strip())
        except ValueError as err:
            raise SpecError(key, f"must be a number (got {text!r})") from err
    if typing.get_origin(base) is tuple:  # a list of names: comma-separated
        return [part.strip() for part in text.split(",") if part.strip()]
    return text


def _env_layer(env: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    hints = typing.get_type_hints(ServerConfig)
    for f in dataclasses.fields(ServerConfig):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            sub_hints = typing.get_type_hints(tp)
            for sf in dataclasses.fields(tp):
                name = f"{ENV_PREFIX}{f.name}_{sf.name}".upper()
                if name in env:
                    out.setdefault(f.name, {})[sf.name] = _coerce(env[name], sub_hints[sf.name], name)
        else:
            name = f"{ENV_PREFIX}{f.name}".upper()
            if name in env:
                out[f.name] = _coerce(env[name], tp, name)
    return out


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), Mapping) else v
    return out


def load_config(file: str | Path | None = None, *, env: Mapping[str, str] | None = None,
                overrides: Mapping[str, Any] | None = None) -> ServerConfig:
    """Defaults < ``file`` < ``TWIN_*`` env vars < ``overrides`` (flags); errors name the key."""
    env = os.environ if env is None else env
    data: dict[str, Any] = {}
    if file is not None:
        loaded = read_mapping(file)
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, Mapping):
            raise SpecError(str(file), "a config file must be a mapping")
        data = _merge(data, loaded)
    data = _merge(data, _env_layer(env))
    data = _merge(data, {k: v for k, v in (overrides or {}).items() if v is not None})
    config = schema.load(ServerConfig, data, "config")
    if config.tls.enabled and not (config.tls.cert_file and config.tls.key_file):
        raise SpecError("config.tls", "cert_file and key_file must be given together")
    if config.tls.mutual and not config.tls.enabled:
        raise SpecError("config.tls.client_ca_file", "mutual TLS needs cert_file and key_file too")
    if config.health_port and config.health_port == config.port:
        raise SpecError("config.health_port", "must differ from port")
    if config.otlp_http_port and config.otlp_http_port in (config.port, config.health_port):
        raise SpecError("config.otlp_http_port", "must differ from port and health_port")
    if config.web.enabled:
        web_port = config.web_bind[1]
        if web_port and web_port in (config.port, config.health_port, config.otlp_http_port):
            raise SpecError("config.web.address", "its port must differ from port, health_port and otlp_http_port")
    return config
