"""The FailureService servicer: a thin adapter over :class:`twin.failure_analyzer.FailureAnalyzer`."""

from __future__ import annotations

from typing import Any

import grpc

from twin.core.errors import SpecError
from twin.core.failures.failure_spec import Injection, parse_injection
from twin.failure_analyzer import FailureAnalyzer
from twin.rpc.v1 import failure_service_pb2 as fpb
from twin.server.context import ServerContext
from twin.server.service_registry import add_service
from twin.server.services import parse_document
from twin.wire import convert
from twin.wire.convert import Limits, dict_to_struct, struct_to_dict, to_jsonable

FAILURE_SERVICE = fpb.DESCRIPTOR.services_by_name["FailureService"]


class FailureServicer:
    """Failure analysis over gRPC."""

    def __init__(self, ctx: ServerContext) -> None:
        self.analyzer = FailureAnalyzer(ctx.engine)
        self.limits = Limits(max_items=ctx.config.limits.max_list_items)

    def _mapping(self, request: fpb.EvaluateFailuresRequest) -> dict[str, Any]:
        source = request.WhichOneof("scenario_source")
        if source == "scenario":
            return convert.scenario_to_mapping(request.scenario, self.limits)
        if source == "scenario_document":
            return parse_document(request.scenario_document, "scenario_document")
        raise SpecError("scenario", "is required (a structured scenario or a scenario_document)")

    def EvaluateFailures(self, request: fpb.EvaluateFailuresRequest,
                         context: grpc.ServicerContext) -> fpb.EvaluateFailuresResponse:
        mapping = self._mapping(request)
        failures = struct_to_dict(request.failures, "failures", self.limits) if request.HasField("failures") else None
        inject = [_injection(text, i) for i, text in enumerate(request.inject)]
        report = self.analyzer.analyze(mapping, failures=failures, inject=inject, rank=request.rank,
                                       pairs=request.pairs and request.rank)
        data = report.to_dict()
        ranking = [fpb.RankedComponent(component=r["component"], kind=r["kind"], count=int(r["count"]),
                                       events_per_day=r["events_per_day"],
                                       expected_cost_h_per_day=r["expected_cost_h_per_day"],
                                       share_pct=r["share_pct"], outcome=str(r["outcome"]),
                                       cost_per_event_s=r["cost_per_event_s"])
                   for r in data.get("ranking") or []]
        return fpb.EvaluateFailuresResponse(
            step_time_s=data["step_time_s"],
            expected_interruptions_per_day=data["expected_interruptions_per_day"],
            mean_time_between_interruptions_h=data["mean_time_between_interruptions_h"],
            effective_training_time_pct=data["effective_training_time_pct"],
            optimal_checkpoint_interval_s=data["optimal_checkpoint_interval_s"],
            goodput_tokens_per_s=data["goodput_tokens_per_s"], ranking=ranking,
            report=dict_to_struct(to_jsonable(data)))


def _injection(text: str, index: int) -> Injection:
    """One ``inject`` entry; errors name the request field, not the CLI flag."""
    try:
        return parse_injection(text, index)
    except SpecError as err:
        raise SpecError(err.field.replace("--inject", "inject"), err.rule) from err


def register_failures(server: grpc.Server, ctx: ServerContext) -> None:
    """Add FailureService to ``server``."""
    add_service(server, ctx, FAILURE_SERVICE, FailureServicer(ctx))

