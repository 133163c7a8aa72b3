"""``python -m twin.server.healthcheck``: exit 0 when the server's gRPC health says SERVING.

For container HEALTHCHECKs (no grpc_health_probe binary needed). Reads TWIN_HEALTH_ADDRESS
(default 127.0.0.1:$TWIN_PORT or :50051); with TWIN_HEALTH_TLS_CA set it speaks TLS.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def main(argv: list[str] | None = None) -> int:
    """Check once; print the status; exit 0 if SERVING, else 1."""
    default = os.environ.get("TWIN_HEALTH_ADDRESS") or f"127.0.0.1:{os.environ.get('TWIN_PORT', '50051')}"
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--address", default=default)
    ap.add_argument("--service", default="", help="service to check ('' = the whole server)")
    ap.add_argument("--ca-file", default=os.environ.get("TWIN_HEALTH_TLS_CA"), help="PEM CA (turns TLS on)")
    ap.add_argument("--timeout", type=float, default=3.0)
    args = ap.parse_args(argv)
    if args.ca_file:
        creds = grpc.ssl_channel_credentials(root_certificates=Path(args.ca_file).read_bytes())
        channel = grpc.secure_channel(args.address, creds)
    else:
        channel = grpc.insecure_channel(args.address)
    with channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=args.service), timeout=args.timeout)
        except grpc.RpcError as err:
            print(f"unhealthy: {err.code().name}: {err.details()}", file=sys.stderr)
            return 1
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    print(status)
    return 0 if reply.status == health_pb2.HealthCheckResponse.SERVING else 1


if __name__ == "__main__":
    sys.exit(main())
