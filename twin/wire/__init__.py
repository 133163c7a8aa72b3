"""The gRPC wire format shared by the server, the client and telemetry's services.

Hand-written, below all three (the generated messages are ``twin.rpc.v1``):

- :mod:`twin.wire.convert`: wire messages <-> the scenario-file mappings and :class:`Estimate`;
- :mod:`twin.wire.status_table`: the one table from domain errors to gRPC status codes, both
  directions (server: error -> status; client: status -> the same error).

It sits here, not in ``twin.server``, so that ``twin.client`` and ``twin.telemetry`` use
the same table and conversions without importing the server (pyproject's import
contracts forbid that).
"""
