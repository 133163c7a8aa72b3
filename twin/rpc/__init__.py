"""Wire protocol of the twin's gRPC service (package ``twin.rpc.v1``), and the Prometheus
remote-write messages the telemetry receiver decodes (``twin.rpc.prompb``).

The modules under ``twin/rpc/v1`` and ``twin/rpc/prompb`` (``*_pb2.py``, ``*_pb2_grpc.py``, ``*_pb2.pyi``) are
generated from ``proto/twin/rpc/*/*.proto`` when the package is built or installed
(``pip install -e .`` included; see setup.py) and are not kept in git. After editing a
.proto file, run ``pip install -e .`` (or ``python setup.py generate_protos``) again.
"""
