"""The optional dependency groups (pyproject.toml's extras) and the error when one is missing.

The base install is the library and every command that evaluates here (predict, validate,
fleet, failures, catalog, plugins, sweep and plan with the inline executor): pluggy, PyYAML,
numpy and rich. The rest is an extra, imported only by the features that use it:

- ``server``: gRPC and protobuf (``twin serve``, ``--server`` on the client verbs,
  ``twin telemetry``) with the OTLP message definitions the server's receiver decodes and the
  snappy decompressor of its Prometheus remote-write receiver;
- ``telemetry``: the OpenTelemetry SDK and exporters (the service's own traces and metrics,
  ``twin demo``'s simulated exporters) and prometheus-client (Prometheus scrape in,
  ``/metrics`` out);
- ``ray``: the Ray executor; ``plot``: matplotlib; ``parquet``: pyarrow;
- ``web``: Starlette and uvicorn (``twin serve``'s web view);
- ``traces``: protobuf (``twin export chakra``, ``twin import trace`` of a Chakra trace).

A feature wraps its imports in :func:`needs_extra`, so a missing extra is a
:class:`~twin.core.errors.MissingExtraError` naming it (exit 2 on the command line,
FAILED_PRECONDITION over gRPC), never a traceback.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from twin.core.errors import MissingExtraError

# The packages each extra provides (a failed import's ``name`` is one of them, inside one, or a
# parent that is missing altogether); tests/test_extras.py checks each against the distributions
# pyproject.toml lists. The server has only opentelemetry.proto of the opentelemetry namespace.
EXTRA_MODULES: dict[str, frozenset[str]] = {
    "server": frozenset({"grpc", "grpc_health", "grpc_reflection", "grpc_status", "google", "opentelemetry.proto",
                         "cramjam"}),
    "telemetry": frozenset({"opentelemetry", "prometheus_client"}),
    "ray": frozenset({"ray"}),
    "plot": frozenset({"matplotlib"}),
    "parquet": frozenset({"pyarrow"}),
    "web": frozenset({"starlette", "uvicorn"}),
    "traces": frozenset({"google"}),
}


@contextmanager
def needs_extra(extra: str, feature: str, field: str = "", alternative: str = "") -> Iterator[None]:
    """Imports inside this block that fail for a module ``extra`` provides raise :class:`MissingExtraError`.

    ``feature`` says what needs it ("twin serve"), ``field`` the setting or flag that asked for
    it ("" when the command itself does), ``alternative`` what works without it. Any other
    ImportError (a module of the twin itself, a module no extra provides) passes through
    unchanged: that is a bug, not a missing install.
    """
    if extra not in EXTRA_MODULES:
        raise ValueError(f"unknown extra {extra!r}; known: {', '.join(sorted(EXTRA_MODULES))}")
    try:
        yield
    except ImportError as err:
        missing = err.name or ""
        if not missing or not any(missing == m or missing.startswith(m + ".") or m.startswith(missing + ".")
                                  for m in EXTRA_MODULES[extra]):
            raise
        raise MissingExtraError(field, extra, feature, missing, alternative) from err
