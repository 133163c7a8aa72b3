"""The one table from domain errors to gRPC status codes, both directions.

Server side, :func:`status_for` turns a :class:`~twin.core.errors.TwinError` into a
``grpc.Status`` carrying a ``google.rpc.Status`` with details: every domain error names
its field in ``google.rpc.BadRequest`` (so a client finds the field the same way for any
code), plus the detail type that fits the code (``ResourceInfo`` for NOT_FOUND,
``PreconditionFailure`` for FAILED_PRECONDITION, ``QuotaFailure`` for RESOURCE_EXHAUSTED).
Anything else becomes INTERNAL with a generic message and an incident id; the traceback
goes to the server log only.

Client side, :func:`error_from_rpc` turns such a status back into the same domain error,
so ``twin predict --server`` reports a remote error exactly like a local one.
"""

from __future__ import annotations

import collections
import logging
import math
import uuid
from typing import Any

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from twin.core.errors import InfeasibleError, NotFoundError, SpecError, TooLargeError, TwinError

# The table. Order matters only for subclasses (none of these derive from each other).
ERROR_TABLE: tuple[tuple[type[TwinError], grpc.StatusCode], ...] = (
    (SpecError, grpc.StatusCode.INVALID_ARGUMENT),
    (NotFoundError, grpc.StatusCode.NOT_FOUND),
    (InfeasibleError, grpc.StatusCode.FAILED_PRECONDITION),
    (TooLargeError, grpc.StatusCode.RESOURCE_EXHAUSTED),
)
INTERNAL_MESSAGE = "internal error (incident {incident}); the server log has the details"

# The incident log is the server's (its JSON log handler and the tests read "twin.server").
log = logging.getLogger("twin.server")


def code_for(err: BaseException) -> grpc.StatusCode:
    """The status code of an error (INTERNAL for anything not in the table)."""
    for cls, code in ERROR_TABLE:
        if isinstance(err, cls):
            return code
    return grpc.StatusCode.INTERNAL


def field_of(err: BaseException) -> str:
    """The dotted field a domain error names ("" when it names none)."""
    return str(getattr(err, "field", "") or "")


def rule_of(err: BaseException) -> str:
    """What the error says about the field (without the field prefix)."""
    for attr in ("rule", "reason"):
        value = getattr(err, attr, None)
        if isinstance(value, str):
            return value
    text = str(err)
    field = field_of(err)
    return text.removeprefix(f"{field}: ") if field else text


# What an error may echo of the request: a status travels in the trailers, which gRPC caps
# (8 KiB by default, grpc.max_metadata_size); a 1 MiB model name echoed whole would turn a
# NOT_FOUND into RESOURCE_EXHAUSTED. Each part is clipped (about 4.5 KiB in all, base64 included).
CLIP_TEXT = 1000
CLIP_NAME = 200


def clip(text: str, limit: int = CLIP_TEXT) -> str:
    """``text`` cut to ``limit`` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit:,} more characters)"


def _pack(msg: Any) -> any_pb2.Any:
    out = any_pb2.Any()
    out.Pack(msg)
    return out


def status_for(err: TwinError) -> grpc.Status:
    """The gRPC status (with google.rpc details) of a domain error."""
    code = code_for(err)
    field, rule = clip(field_of(err), CLIP_NAME), clip(rule_of(err))
    details = [_pack(error_details_pb2.BadRequest(field_violations=[
        error_details_pb2.BadRequest.FieldViolation(field=field, description=rule)]))]
    if isinstance(err, NotFoundError):
        details.append(_pack(error_details_pb2.ResourceInfo(
            resource_type=field, resource_name=clip(str(err.name), CLIP_NAME),
            description=clip("known: " + ", ".join(err.known)) if err.known else "")))
    elif isinstance(err, InfeasibleError):
        details.append(_pack(error_details_pb2.PreconditionFailure(violations=[
            error_details_pb2.PreconditionFailure.Violation(type="INFEASIBLE", subject=field, description=rule)])))
    elif isinstance(err, TooLargeError):
        details.append(_pack(error_details_pb2.QuotaFailure(violations=[
            error_details_pb2.QuotaFailure.Violation(subject=field, description=rule)])))
    status = status_pb2.Status(code=code.value[0], message=clip(str(err)), details=details)
    return rpc_status.to_status(status)


def retry_status(code: grpc.StatusCode, message: str, retry_after_s: float, field: str = "") -> grpc.Status:
    """``code`` with ``google.rpc.RetryInfo`` (and ``QuotaFailure`` naming ``field`` when given).

    RetryInfo travels in ``grpc-status-details-bin`` (the rich-error model) and, for clients
    that read only plain trailers, as ``google.rpc.retryinfo-bin`` and ``retry-after-s``.
    """
    frac, whole = math.modf(max(0.0, retry_after_s))
    info = error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=int(whole), nanos=int(frac * 1e9)))
    details = [_pack(info)]
    if field:
        details.append(_pack(error_details_pb2.QuotaFailure(violations=[
            error_details_pb2.QuotaFailure.Violation(subject=field, description=clip(message))])))
    status = status_pb2.Status(code=code.value[0], message=clip(message), details=details)
    return _Status(code, clip(message), (("grpc-status-details-bin", status.SerializeToString()),
                                         ("google.rpc.retryinfo-bin", info.SerializeToString()),
                                         ("retry-after-s", f"{retry_after_s:.3g}")))


class _Status(collections.namedtuple("_Status", ("code", "details", "trailing_metadata")), grpc.Status):
    pass


def internal_status(method: str, err: BaseException) -> grpc.Status:
    """INTERNAL with a generic message; the traceback is logged under an incident id."""
    incident = uuid.uuid4().hex[:12]
    log.error("unexpected error in %s", method, exc_info=err, extra={"incident": incident, "method": method})
    return rpc_status.to_status(status_pb2.Status(code=code_pb2.INTERNAL,
                                                  message=INTERNAL_MESSAGE.format(incident=incident)))


# ---------------------------------------------------------------- client direction
class RemoteError(TwinError):
    """A call to a twin server failed for a reason that is not a domain error."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        self.code = code
        super().__init__(f"{code.name}: {message}")


def _details(err: grpc.RpcError) -> list[Any]:
    try:
        status = rpc_status.from_call(err)  # type: ignore[arg-type]
    except ValueError:  # code/message of the trailer disagree with the call's
        return []
    if status is None:
        return []
    out: list[Any] = []
    for detail in status.details:
        for cls in (error_details_pb2.BadRequest, error_details_pb2.ResourceInfo,
                    error_details_pb2.PreconditionFailure, error_details_pb2.QuotaFailure):
            if detail.Is(cls.DESCRIPTOR):
                msg = cls()
                detail.Unpack(msg)
                out.append(msg)
    return out


def error_from_rpc(err: grpc.RpcError) -> TwinError:
    """The domain error a failed call stands for (or :class:`RemoteError`)."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    message = err.details() if hasattr(err, "details") else str(err)
    details = _details(err)
    field, rule, name, known = "", message or "", "", ()
    for d in details:
        if isinstance(d, error_details_pb2.BadRequest) and d.field_violations:
            field, rule = d.field_violations[0].field, d.field_violations[0].description
        elif isinstance(d, error_details_pb2.ResourceInfo):
            name = d.resource_name
            known = tuple(k.strip() for k in d.description.removeprefix("known: ").split(",") if k.strip())
    for cls, table_code in ERROR_TABLE:
        if code != table_code or not details:
            continue
        if cls is NotFoundError:
            return NotFoundError(field, name, known)
        return cls(field, rule)  # type: ignore[call-arg]
    return RemoteError(code, message or "")
