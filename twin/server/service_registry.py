"""Registering a servicer: :mod:`twin.wire.method_handlers` (safe decoding, the error table) plus the
service names the health and reflection services cover.
"""

from __future__ import annotations

import grpc
from google.protobuf.descriptor import ServiceDescriptor

from twin.server.context import ServerContext
from twin.wire.method_handlers import generic_handler


def add_service(server: grpc.Server, ctx: ServerContext, service: ServiceDescriptor, impl: object) -> None:
    """Register ``impl`` (an object with one method per RPC, named as in the .proto) for ``service``."""
    server.add_generic_rpc_handlers((generic_handler(service, impl),))
    if service.full_name not in ctx.service_names:
        ctx.service_names.append(service.full_name)
