"""Method handlers built from a service descriptor: safe decoding and the error table.

Every service a twin process serves (the gRPC services, telemetry, Health) gets the same
treatment from :func:`method_handler`:

- a request that does not decode is INVALID_ARGUMENT naming the request type, never the
  INTERNAL that gRPC's own decoder failure gives;
- domain errors map through ``twin.wire.status_table`` (one table), anything else is INTERNAL
  with a generic message and the traceback in the log.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import grpc
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor
from google.protobuf.message import DecodeError, Message
from google.protobuf.message_factory import GetMessageClass

from twin.core.errors import SpecError, TwinError
from twin.wire.status_table import internal_status, status_for


class Malformed:
    """Stands for a request whose bytes did not decode."""

    __slots__ = ("reason", "type_name")

    def __init__(self, type_name: str, reason: str) -> None:
        self.type_name = type_name
        self.reason = reason


def safe_parser(cls: type[Message]) -> Callable[[bytes], Message | Malformed]:
    """A request deserializer that returns :class:`Malformed` instead of raising."""
    name = cls.DESCRIPTOR.full_name

    def parse(data: bytes) -> Message | Malformed:
        try:
            return cls.FromString(data)
        except (DecodeError, ValueError, RecursionError) as err:
            return Malformed(name, str(err) or type(err).__name__)

    return parse


def refuse_malformed(request: Any, context: grpc.ServicerContext) -> None:
    """Abort with INVALID_ARGUMENT naming ``request`` when it did not decode (for handlers
    that drive a library's servicer and so cannot use :func:`method_handler`).
    """
    if isinstance(request, Malformed):
        context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                      f"request: is not a valid {request.type_name} message ({request.reason})")


def _check(request: Any) -> None:
    if isinstance(request, Malformed):
        raise SpecError("request", f"is not a valid {request.type_name} message ({request.reason})")


def _fail(context: grpc.ServicerContext, method: str, err: BaseException) -> None:
    # An abort by the servicer itself has already set the code: let it through untouched.
    if not isinstance(err, TwinError) and context.code() is not None:
        raise err
    status = status_for(err) if isinstance(err, TwinError) else internal_status(method, err)
    context.abort_with_status(status)


def _unary(fn: Callable[..., Any], method: str) -> Callable[[Any, grpc.ServicerContext], Any]:
    @functools.wraps(fn)
    def handler(request: Any, context: grpc.ServicerContext) -> Any:
        try:
            _check(request)
            return fn(request, context)
        except Exception as err:
            _fail(context, method, err)
            raise  # pragma: no cover - abort_with_status always raises

    return handler


def _streaming(fn: Callable[..., Iterator[Any]], method: str) -> Callable[[Any, grpc.ServicerContext], Iterator[Any]]:
    @functools.wraps(fn)
    def handler(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        try:
            _check(request)
            yield from fn(request, context)
        except Exception as err:
            _fail(context, method, err)

    return handler


def method_handler(method: MethodDescriptor, impl: Callable[..., Any]) -> grpc.RpcMethodHandler:
    """One method's handler with safe decoding and the error table."""
    request_cls = GetMessageClass(method.input_type)
    response_cls = GetMessageClass(method.output_type)
    parse = safe_parser(request_cls)
    serialize = response_cls.SerializeToString
    name = f"/{method.containing_service.full_name}/{method.name}"
    if method.client_streaming and method.server_streaming:
        return grpc.stream_stream_rpc_method_handler(_streaming_both(impl, name), parse, serialize)
    if method.client_streaming:
        return grpc.stream_unary_rpc_method_handler(_stream_unary(impl, name), parse, serialize)
    if method.server_streaming:
        return grpc.unary_stream_rpc_method_handler(_streaming(impl, name), parse, serialize)
    return grpc.unary_unary_rpc_method_handler(_unary(impl, name), parse, serialize)


def _checked_iter(requests: Iterator[Any]) -> Iterator[Any]:
    for r in requests:
        _check(r)
        yield r


def _stream_unary(fn: Callable[..., Any], method: str) -> Callable[..., Any]:
    @functools.wraps(fn)
    def handler(requests: Iterator[Any], context: grpc.ServicerContext) -> Any:
        try:
            return fn(_checked_iter(requests), context)
        except Exception as err:
            _fail(context, method, err)
            raise  # pragma: no cover

    return handler


def _streaming_both(fn: Callable[..., Iterator[Any]], method: str) -> Callable[..., Iterator[Any]]:
    @functools.wraps(fn)
    def handler(requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
        try:
            yield from fn(_checked_iter(requests), context)
        except Exception as err:
            _fail(context, method, err)

    return handler


def generic_handler(service: ServiceDescriptor, impl: object) -> grpc.GenericRpcHandler:
    """The handlers of every method of ``service``, implemented by ``impl``'s methods of the same names."""
    handlers: dict[str, grpc.RpcMethodHandler] = {}
    for method in service.methods:
        fn = getattr(impl, method.name, None)
        if fn is None:
            raise TypeError(f"{type(impl).__name__} does not implement {service.full_name}.{method.name}")
        handlers[method.name] = method_handler(method, fn)
    return grpc.method_handlers_generic_handler(service.full_name, handlers)
