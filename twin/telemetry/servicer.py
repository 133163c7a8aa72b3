"""The twin.rpc.v1.TelemetryService servicer: thin conversion between protos and the service."""

from __future__ import annotations

import bisect
import json
import logging
from collections.abc import Callable
from typing import Any, TypeVar

import grpc

from twin.core.errors import SpecError, TwinError
from twin.rpc.v1 import estimate_pb2, scenario_pb2
from twin.rpc.v1 import telemetry_pb2 as pb  # generated at install time (setup.py)
from twin.rpc.v1 import telemetry_pb2_grpc as pb_grpc
from twin.telemetry.service import TelemetryService
from twin.wire.method_handlers import generic_handler
from twin.wire.status_table import internal_status, status_for

log = logging.getLogger(__name__)
T = TypeVar("T")
STATE = {"up": pb.COMPONENT_STATE_UP, "degraded": pb.COMPONENT_STATE_DEGRADED, "down": pb.COMPONENT_STATE_DOWN}
STATE_NAME = {v: k for k, v in STATE.items()}
BASIS = {pb.PREDICTION_BASIS_UNSPECIFIED: "both", pb.PREDICTION_BASIS_DESIGNED: "designed",
         pb.PREDICTION_BASIS_NOW: "now"}


def _call(context: grpc.ServicerContext, fn: Callable[[], T]) -> T:
    """Run ``fn``; domain errors go through the one error table (``twin.wire.status_table``)."""
    try:
        return fn()
    except TwinError as err:
        context.abort_with_status(status_for(err))
        raise  # unreachable: abort raises
    except Exception as err:
        context.abort_with_status(internal_status("twin.rpc.v1.TelemetryService", err))
        raise  # unreachable: abort raises


def _component(c: dict[str, Any]) -> pb.LiveComponent:
    return pb.LiveComponent(
        id=c["id"], kind=c["kind"], host=c["host"], tier=c["tier"], state=STATE[c["state"]],
        evidence=[pb.Evidence(signal=e["signal"], value=e["value"], rule=e["rule"], severity=e["severity"],
                              why=e["why"], metric=e["metric"]) for e in c["evidence"]],
        capacity_fraction=c["capacity"], tx_bytes_per_s=c["tx_Bps"], rx_bytes_per_s=c["rx_Bps"],
        errors_per_s=c["errors_per_s"], signals=c["signals"], labels=c["labels"],
        last_seen_unix_nano=c["last_seen_ns"], since_unix_nano=c["since_ns"])


def _tier(t: dict[str, Any]) -> pb.TierCapacity:
    return pb.TierCapacity(tier=t["tier"], capacity_fraction=t["capacity"], limited_by=t["limited_by"],
                           down=t["down"], degraded=t["degraded"], notes=t["notes"])


def _cal(c: dict[str, Any]) -> scenario_pb2.Calibration:
    return scenario_pb2.Calibration(**c)


def _job(j: dict[str, Any], history: Any = ()) -> pb.JobDivergence:
    return pb.JobDivergence(job=j["job"], observed_step_time_s=j["observed_step_time_s"],
                            observations=j.get("observations", 0),
                            predicted_designed_s=j.get("predicted_designed_s", 0),
                            predicted_now_s=j["predicted_now_s"], divergence_designed=j.get("divergence_designed", 0),
                            divergence_now=j["divergence_now"],
                            history=[pb.StepSample(time_unix_nano=h["time_ns"], predicted_designed_s=h["designed_s"],
                                                   predicted_now_s=h["now_s"], observed_step_time_s=h["observed_s"])
                                     for h in history])


def _fault(f: dict[str, Any]) -> pb.LiveFault:
    cost = f.get("interruption")
    return pb.LiveFault(component=f["component"], host=f["host"], kind=f["kind"], consequence=f["consequence"],
                        evidence=f["evidence"], factor=f["factor"], why=f["why"], source=f["source"],
                        node_rank=f["node_rank"], gpu_rank=f["gpu_rank"],
                        interruption=pb.InterruptionCost(**cost) if cost else None)


def _placement(p: dict[str, Any]) -> pb.PlacementStatus:
    return pb.PlacementStatus(known=p["known"], ranked_hosts=p["ranked_hosts"], ranked_by=p["ranked_by"],
                              parts=p["parts"], parts_outside=p["parts_outside"],
                              placement=pb.JobPlacement(hosts=p.get("hosts", []), selector=p.get("selector", {}),
                                                        rank_attribute=p.get("rank_attribute", "")))


def _adjustment(a: dict[str, Any]) -> pb.Adjustment:
    return pb.Adjustment(seq=a["seq"], time_unix_nano=a["time_ns"], factor=a["factor"], old_value=a["old"],
                         new_value=a["new"], reason=a["reason"])


class TelemetryServicer(pb_grpc.TelemetryServiceServicer):
    """twin.rpc.v1.TelemetryService over a :class:`TelemetryService`."""

    def __init__(self, service: TelemetryService) -> None:
        self.service = service

    def GetLiveState(self, request: pb.GetLiveStateRequest, context: grpc.ServicerContext) -> pb.GetLiveStateResponse:
        states = tuple(STATE_NAME[s] for s in request.states if s in STATE_NAME)
        size = request.page_size or DEFAULT_PAGE
        if not 0 < size <= MAX_PAGE:
            context.abort_with_status(status_for(SpecError(
                "page_size", f"must be between 1 and {MAX_PAGE} (got {request.page_size})")))
        st = _call(context, lambda: self.service.live_state(tuple(request.kinds), states, request.max_events or 100))
        comps = sorted(st["components"], key=lambda c: c["id"])
        start = bisect.bisect_right([c["id"] for c in comps], request.page_token) if request.page_token else 0
        page = comps[start:start + size]
        more = start + size < len(comps)
        ing = st["ingest"]
        return pb.GetLiveStateResponse(
            components=[_component(c) for c in page], total_components=len(comps),
            next_page_token=page[-1]["id"] if more and page else "",
            switches=[pb.Switch(id=s["id"], state=STATE[s["state"]], ports=s["ports"], ports_down=s["ports_down"],
                                ports_degraded=s["ports_degraded"]) for s in st["switches"]],
            tiers=[_tier(t) for t in st["tiers"]],
            events=[pb.StateEvent(time_unix_nano=e["time_ns"], component=e["component"],
                                  old_state=STATE.get(e["old"], 0), new_state=STATE.get(e["new"], 0), why=e["why"])
                    for e in st["events"]],
            ingest=pb.IngestStats(**{k: int(v) for k, v in ing.items()}),
            database_moved_aside=str(self.service.store.moved_aside or ""), unplaced_hosts=st["unplaced_hosts"])

    def RegisterJob(self, request: pb.RegisterJobRequest, context: grpc.ServicerContext) -> pb.RegisterJobResponse:
        placement = None
        if request.HasField("placement"):
            p = request.placement
            placement = {"hosts": list(p.hosts), "selector": dict(p.selector), "rank_attribute": p.rank_attribute}
        step = _call(context, lambda: self.service.register_job(request.job, request.scenario_yaml, placement))
        hosts = _call(context, lambda: self.service.ranked_hosts(request.job))
        return pb.RegisterJobResponse(job=request.job, predicted_step_time_s=step, ranked_hosts=hosts)

    def PredictLive(self, request: pb.PredictLiveRequest, context: grpc.ServicerContext) -> pb.PredictLiveResponse:
        out = _call(context, lambda: self.service.predict(request.job, request.scenario_yaml,
                                                          BASIS.get(request.basis, "both")))
        return pb.PredictLiveResponse(
            designed_step_time_s=out.get("designed_step_time_s", 0.0), now_step_time_s=out.get("now_step_time_s", 0.0),
            slowdown=out.get("slowdown", 0.0), now_calibration=_cal(out["now_calibration"]),
            tiers=[_tier(t) for t in out["tiers"]], down_components=out["down_components"],
            degraded_components=out["degraded_components"],
            designed_estimate_json=json.dumps(out["designed"]) if "designed" in out else "",
            now_estimate_json=json.dumps(out["now"]) if "now" in out else "", notes=out["notes"],
            designed_interval=_interval(out.get("designed")), now_interval=_interval(out.get("now")),
            faults=[_fault(f) for f in out["faults"]], placement=_placement(out["placement"]),
            interrupted=out["interrupted"], interruption_cost_s=out["interruption_cost_s"],
            goodput_lost_gpu_hours=out["goodput_lost_gpu_hours"], calibration_skipped=out["calibration_skipped"])

    def GetDivergence(self, request: pb.GetDivergenceRequest,
                      context: grpc.ServicerContext) -> pb.GetDivergenceResponse:
        def answer() -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
            rows = self.service.divergence()
            return rows, self.service.history(None, request.history_points) if request.history_points else {}

        rows, history = _call(context, answer)
        return pb.GetDivergenceResponse(jobs=[_job(j, history.get(j["job"], ())) for j in rows])

    def Calibrate(self, request: pb.CalibrateRequest, context: grpc.ServicerContext) -> pb.CalibrateResponse:
        out = _call(context, self.service.calibrate)
        return pb.CalibrateResponse(calibration=_cal(out["calibration"]),
                                    adjustments=[_adjustment(a) for a in out["adjustments"]],
                                    jobs=[_job(j) for j in out["jobs"]],
                                    skipped=[pb.SkippedJob(**s) for s in out["skipped"]],
                                    compute_ceiling=out["compute_ceiling"])

    def GetCalibration(self, request: pb.GetCalibrationRequest,
                       context: grpc.ServicerContext) -> pb.GetCalibrationResponse:
        out = _call(context, self.service.calibration_state)
        return pb.GetCalibrationResponse(calibration=_cal(out["calibration"]),
                                         history=[_adjustment(a) for a in out["history"]],
                                         skipped=[pb.SkippedJob(**s) for s in out["skipped"]])

    def GetIgnoredMetrics(self, request: pb.GetIgnoredMetricsRequest,
                          context: grpc.ServicerContext) -> pb.GetIgnoredMetricsResponse:
        rows = _call(context, self.service.ignored_metrics)
        return pb.GetIgnoredMetricsResponse(metrics=[pb.IgnoredMetric(
            name=r["name"], exporter=r["exporter"], points=r["points"], reason=r["reason"],
            first_seen_unix_nano=r["first_seen_ns"], last_seen_unix_nano=r["last_seen_ns"]) for r in rows])


# Components per GetLiveState page: 1,000 live components are ~0.2 MB on the wire, far under a
# default client's 4 MiB receive limit; 10,000 at most.
DEFAULT_PAGE = 1000
MAX_PAGE = 10_000


def add_to_server(service: TelemetryService, server: grpc.Server) -> None:
    """Add the telemetry API to ``server`` (safe decoding: garbage bytes are INVALID_ARGUMENT)."""
    server.add_generic_rpc_handlers((generic_handler(pb.DESCRIPTOR.services_by_name["TelemetryService"],
                                                     TelemetryServicer(service)),))


def _interval(estimate: dict[str, Any] | None) -> estimate_pb2.StepInterval | None:
    """The interval of an estimate's plain data (``Estimate.to_dict``), None without one."""
    data = (estimate or {}).get("interval")
    return None if data is None else estimate_pb2.StepInterval(**data)
