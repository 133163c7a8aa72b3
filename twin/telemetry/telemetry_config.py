"""Settings of the telemetry capability (defaults, and how ``twin serve``'s config feeds them)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twin.core.calibration import FitSettings
from twin.core.errors import SpecError

MIB = 1 << 20


@dataclass(frozen=True)
class TelemetryConfig:
    """Telemetry settings.

    ``max_receive_bytes``: largest OTLP request accepted (gRPC's default is 4 MiB; a
    Collector batch of a large cluster exceeds it, so the default is 64 MiB).
    ``max_pending_points``: points decoded and waiting for the writer before requests are
    refused with UNAVAILABLE + RetryInfo(``retry_after_s``).
    ``max_series``/``max_components``: cardinality caps (memory bound).
    ``otlp_address``: also serve OTLP on a dedicated port (e.g. ``0.0.0.0:4317``, the
    OTLP/gRPC default port); None: only on the server it is registered with.
    ``otlp_http_host``/``otlp_http_port``: the OTLP/HTTP receiver (``POST /v1/metrics``;
    4318 is the OTLP/HTTP default port, 0 picks a free one); None: off. Under ``twin serve``
    they come from its ``host`` and ``otlp_http_port`` settings.
    ``series_checkpoint_s``: how often counter baselines are written (component state is
    written with every batch).
    ``calibrate_interval_s``: automatic calibration period (0: only when asked).
    ``history_interval_s``: how often each job's predicted (designed, now) and observed step times are
    sampled into the stored history (``Store.save_history``; a sample only when one of them moved),
    whether or not anyone is looking; 0: only when a page or ``GetDivergence`` asks. 15 s: the
    default period of the twin's own metrics (``self_metrics_interval_s``), a Prometheus scrape's order.
    ``self_metrics_endpoint``: OTLP endpoint for the twin's own metrics (divergence,
    calibration factors, ingest counters); None: not exported.
    ``scrape``: Prometheus exposition endpoints to read directly (``twin.telemetry.scrape``):
    a list of ``{url, interval_s, timeout_s, host, job}``; empty: none.
    ``metrics_address``: serve the twin's predictions and live state as Prometheus metrics on
    ``http://host:port/metrics`` (``twin.telemetry.promexport``; port 0: a free one); None: off.
    ``degrade_after`` / ``recover_after``: consecutive assessments of a component that must
    agree before its state turns worse / better (hysteresis). Defaults 1 and 3: a fault is
    acted on at its first evidence (each assessment already reads counters over an export
    interval), and a flapping port must stay clean for three intervals before it counts as
    up again, as route-flap damping holds back a flapping route until it is stable (RFC 2439)
    and Kubernetes probes demand consecutive results (``failureThreshold`` default 3).
    """

    state_dir: Path = Path("state")
    max_receive_bytes: int = 64 * MIB
    # ~0.4 s of the writer's work at the ~250,000 points/s it applies and commits on 2 cores
    # (benchmarks/bench_ingest.py): past it an exporter is told to retry (UNAVAILABLE / 503) instead
    # of waiting seconds for its commit (1,000,000 made accepted exports wait 2 s at 2x load,
    # benchmarks/bench_overload.py). An empty queue takes one request of any size.
    max_pending_points: int = 100_000
    retry_after_s: float = 1.0
    max_series: int = 200_000
    max_components: int = 50_000
    otlp_address: str | None = None
    otlp_http_host: str = "127.0.0.1"
    otlp_http_port: int | None = None
    calibrate_interval_s: float = 60.0
    history_interval_s: float = 15.0
    min_observations: int = 3
    synchronous: str = "NORMAL"
    series_checkpoint_s: float = 5.0
    self_metrics_endpoint: str | None = None
    self_metrics_interval_s: float = 15.0
    fit: FitSettings = field(default_factory=FitSettings)
    degrade_after: int = 1
    recover_after: int = 3
    metrics_address: str | None = None
    scrape: tuple[Any, ...] = ()

    @property
    def db_path(self) -> Path:
        """The SQLite file."""
        return Path(self.state_dir) / "telemetry.sqlite3"

    def validate(self) -> None:
        """Reject impossible settings, naming the field."""
        for name in ("max_receive_bytes", "max_pending_points", "max_series", "max_components", "min_observations",
                     "degrade_after", "recover_after"):
            if int(getattr(self, name)) < 1:
                raise SpecError(f"telemetry.{name}", f"must be >= 1 (got {getattr(self, name)})")
        if self.retry_after_s <= 0:
            raise SpecError("telemetry.retry_after_s", f"must be > 0 (got {self.retry_after_s})")
        for name in ("calibrate_interval_s", "history_interval_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < float("inf"):
                raise SpecError(f"telemetry.{name}", f"must be a number of seconds >= 0 (got {value!r})")
        from twin.telemetry.scrape import scrape_targets

        scrape_targets(list(self.scrape))
        if self.otlp_http_port is not None and not 0 <= int(self.otlp_http_port) <= 65535:
            raise SpecError("otlp_http_port", f"must be in [0, 65535] (got {self.otlp_http_port})")
        if self.synchronous.upper() not in ("NORMAL", "FULL"):
            raise SpecError("telemetry.synchronous", f"must be NORMAL or FULL (got {self.synchronous!r})")

    @classmethod
    def from_server_config(cls, config: Any) -> TelemetryConfig:
        """From ``twin serve``'s config: its ``state_dir``, plus a ``telemetry`` mapping or object if present."""
        base = cls(state_dir=Path(getattr(config, "state_dir", "state")),
                   otlp_http_host=getattr(config, "host", cls.otlp_http_host),
                   otlp_http_port=getattr(config, "otlp_http_port", None))
        extra = getattr(config, "telemetry", None)
        if extra is None:
            return base
        if isinstance(extra, TelemetryConfig):
            return dataclasses.replace(extra, state_dir=base.state_dir, otlp_http_host=base.otlp_http_host,
                                       otlp_http_port=base.otlp_http_port)
        # state_dir and the OTLP/HTTP listener are the server's own settings (host, otlp_http_port).
        known = {f.name for f in dataclasses.fields(cls)} - {"state_dir", "fit", "otlp_http_host", "otlp_http_port"}
        values = dict(extra) if isinstance(extra, dict) else {k: getattr(extra, k) for k in known if hasattr(extra, k)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise SpecError(f"telemetry.{unknown[0]}", f"unknown setting; expected one of {', '.join(sorted(known))}")
        cfg = dataclasses.replace(base, **values)
        cfg.validate()
        return cfg
