"""Bearer-token authentication as a server interceptor; probes (Health, reflection) stay open.

Clients send ``authorization: Bearer <token>`` metadata. The token is compared in constant
time (``hmac.compare_digest``) so response timing does not leak how much of it matched.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import grpc

from twin.core.errors import SpecError
from twin.server.server_config import AuthConfig

# Services reachable without a token: Kubernetes probes and grpcurl discovery need them.
OPEN_SERVICES = ("grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection",
                 "grpc.reflection.v1.ServerReflection")


def load_token(auth: AuthConfig, env: Mapping[str, str] | None = None) -> str | None:
    """The configured token (file first, then the env var), or None when auth is off."""
    env = os.environ if env is None else env
    if auth.token_file:
        try:
            token = Path(auth.token_file).read_text(encoding="utf-8").strip()
        except OSError as err:
            raise SpecError("config.auth.token_file", f"cannot read {auth.token_file}: {err.strerror or err}") from err
        if not token:
            raise SpecError("config.auth.token_file", f"{auth.token_file} is empty")
        return token
    token = env.get(auth.token_env, "").strip() if auth.token_env else ""
    return token or None


def _deny(handler: grpc.RpcMethodHandler, message: str) -> grpc.RpcMethodHandler:
    def abort(_request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(abort)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(abort)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(abort)
    return grpc.unary_unary_rpc_method_handler(abort)


class TokenAuthInterceptor(grpc.ServerInterceptor):
    """Rejects calls without the right bearer token with UNAUTHENTICATED (open services excepted)."""

    def __init__(self, token: str, open_services: tuple[str, ...] = OPEN_SERVICES) -> None:
        self._expected = f"Bearer {token}".encode()
        self._open = tuple(f"/{s}/" for s in open_services)

    def intercept_service(self, continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
                          handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        method = handler_call_details.method or ""
        handler = continuation(handler_call_details)
        if handler is None or method.startswith(self._open):
            return handler
        given = b""
        for key, value in handler_call_details.invocation_metadata or ():
            if key == "authorization":
                given = value.encode() if isinstance(value, str) else bytes(value)
                break
        if hmac.compare_digest(given, self._expected):
            return handler
        return _deny(handler, "missing or wrong bearer token (metadata 'authorization: Bearer <token>')")
