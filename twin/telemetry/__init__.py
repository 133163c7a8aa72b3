"""Live telemetry: an OTLP/gRPC metrics receiver, metric mapping, live state, calibration.

Plugs into ``twin serve`` through :func:`twin.telemetry.service.register`; runs on its own
with ``python -m twin.telemetry.standalone``. See ``docs/telemetry.md``.
"""
