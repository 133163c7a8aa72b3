"""Execution traces out and in: an adapter over :class:`~twin.engine.Engine`.

- ``chakra_export``: ``twin export chakra``: a scenario's step as MLCommons Chakra execution
  traces, one per pipeline rank, that ASTRA-sim replays (``docs/traces.md``);
- ``chakra_schema``: the Chakra protobuf schema (``proto/twin/rpc/chakra/et_def.proto``) and its
  length-delimited file format, read and written;
- ``kineto`` and ``chakra_import``: a real run's trace read in (a PyTorch profiler Chrome-trace
  JSON, or a Chakra trace): per-kernel classes and times, communication calls and sizes;
- ``trace_compare``: where the measured step differs from the twin's, and the calibration a
  measured trace supports.
"""
