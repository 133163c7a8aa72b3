"""Prometheus remote-write messages (``prompb``), generated from proto/twin/rpc/prompb at build time."""
