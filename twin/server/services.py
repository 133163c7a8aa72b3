"""The built-in servicers: TwinService (Predict, Validate, GetCatalog) and SweepService.

Thin by design: decode the scenario into the file-format mapping, hand it to the engine,
encode the answer. Rules live in the core; error codes live in ``twin.wire.status_table``.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

import grpc
import numpy as np

from twin.core import schema
from twin.core.docload import parse_document as load_document
from twin.core.errors import InfeasibleError, SpecError, TooLargeError, TwinError
from twin.core.estimate import Estimate
from twin.core.specs import Scenario
from twin.engine import Engine
from twin.fleet_report import evaluate_fleet
from twin.rpc.v1 import catalog_pb2, scenario_pb2, sweep_service_pb2, twin_service_pb2
from twin.server import guard, sweep_events
from twin.server.context import ServerContext
from twin.server.rowchunks import RowChunker, rows_per_message
from twin.wire import convert, row_encoding
from twin.wire.convert import Limits
from twin.wire.status_table import code_for, field_of, rule_of

CACHE_KEY_MAX = 16 * 1024
TWIN_SERVICE = twin_service_pb2.DESCRIPTOR.services_by_name["TwinService"]
SWEEP_SERVICE = sweep_service_pb2.DESCRIPTOR.services_by_name["SweepService"]
# A call that ends this close to its deadline ended for the deadline. The client's deadline starts when
# it sends the call, the server's when the call arrives, so the client's own timer fires first and its
# cancel can reach the server before the server's deadline has passed, by up to the call's transit
# time (longer on a loaded machine: CI once logged such a stop as "cancelled"). A client that cancels
# by hand this close to its deadline is, for the log, indistinguishable and harmless.
DEADLINE_SLACK_S = 1.0
# Seconds a refused sweep stream is told to wait: a sweep holds its slot for seconds to minutes.
STREAM_RETRY_S = 5
SWEEP_METHOD = "/twin.rpc.v1.SweepService/Sweep"


def stop_reason(*, finished: bool, failed: str, shutdown: bool, remaining_s: float | None) -> str:
    """Why a streamed call ended, for its log record: "" when it finished, else the error's type name,
    "shutdown", "deadline" (no more than :data:`DEADLINE_SLACK_S` of its deadline left) or "cancelled".
    """
    if failed:
        return failed
    if finished:
        return ""
    if shutdown:
        return "shutdown"
    if remaining_s is not None and remaining_s <= DEADLINE_SLACK_S:
        return "deadline"
    return "cancelled"


def parse_document(text: str, field: str) -> Any:
    """A YAML/JSON document from a request: the bounded reader, aliases refused (``twin.core.docload``)."""
    return load_document(text, field, allow_aliases=False)


def catalog_message(engine: Engine) -> catalog_pb2.Catalog:
    """Everything the engine knows, as a Catalog message (:meth:`Engine.catalog_document` encoded)."""
    doc = engine.catalog_document()

    def presets(rows: list[dict[str, Any]]) -> list[catalog_pb2.Preset]:
        return [catalog_pb2.Preset(name=p["name"], origin=p["origin"], source=p["source"],
                                   spec=convert.dict_to_struct(p["spec"])) for p in rows]

    return catalog_pb2.Catalog(twin_version=doc["twin_version"], gpus=presets(doc["gpus"]),
                               systems=presets(doc["systems"]), models=presets(doc["models"]),
                               efficiency_profiles=presets(doc["efficiency_profiles"]),
                               fabrics=[catalog_pb2.Component(**c) for c in doc["fabrics"]],
                               strategies=[catalog_pb2.Component(**c) for c in doc["strategies"]],
                               plugins=[catalog_pb2.Plugin(**p) for p in doc["plugins"]])


class TwinServicer:
    """twin.rpc.v1.TwinService."""

    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx
        self.engine = ctx.engine
        limits = ctx.config.limits
        self.limits = Limits(max_items=limits.max_list_items)
        self.max_num_gpus = limits.max_num_gpus
        self._catalog = twin_service_pb2.GetCatalogResponse(catalog=catalog_message(self.engine))
        # Resolving presets and checking every rule costs more than evaluating (~0.8 ms);
        # the engine never changes while serving and scenarios are frozen, so requests
        # that repeat (ops tooling polling the same question) reuse the checked scenario.
        # Errors are not cached (lru_cache keeps only returned values).
        size = ctx.config.scenario_cache
        self._resolve_cached = functools.lru_cache(maxsize=size)(self._resolve) if size else self._resolve
        # For the same reason, the answer to a repeated Predict: evaluating a checked
        # scenario and building its wire message cost ~0.3 ms of the ~1.3 ms of server CPU a
        # call takes (benchmarks/bench_server.py), and both are pure functions of the scenario.
        self._predict_cached = functools.lru_cache(maxsize=size)(self._predict) if size else self._predict

    def _resolve(self, source: str | None, key: bytes | str) -> Scenario:
        if source == "scenario":
            mapping = convert.scenario_to_mapping(scenario_pb2.Scenario.FromString(key), self.limits)
        elif source == "scenario_document":
            mapping = parse_document(str(key), "scenario_document")
        else:
            raise SpecError("scenario", "is required (a structured scenario or a scenario_document)")
        self._check_size(mapping)
        return self.engine.scenario(mapping)

    def _check_size(self, mapping: Any) -> None:
        """A request over the server's size limits is RESOURCE_EXHAUSTED, checked before the
        spec rules (which reject absurd sizes too, but as bad input).
        """
        cluster = mapping.get("cluster") if isinstance(mapping, dict) else None
        n = cluster.get("num_gpus") if isinstance(cluster, dict) else None
        if isinstance(n, int | float) and not isinstance(n, bool) and n > self.max_num_gpus:
            raise TooLargeError("cluster.num_gpus", f"{n:.0f} GPUs is over the server's limit "
                                                    f"of {self.max_num_gpus} (limits.max_num_gpus)")

    @staticmethod
    def _scenario_key(request: Any) -> tuple[str | None, bytes | str]:
        """Which scenario field a request sets, and its value as a cache key."""
        source = request.WhichOneof("scenario_source")
        key: bytes | str = b""
        if source == "scenario":
            key = request.scenario.SerializeToString(deterministic=True)
        elif source == "scenario_document":
            key = request.scenario_document
        return source, key

    def _scenario(self, request: Any) -> Scenario:
        return self._scenario_of(*self._scenario_key(request))

    def _scenario_of(self, source: str | None, key: bytes | str) -> Scenario:
        # Only small keys are cached: a 4 MiB document would pin 4 MiB per entry.
        resolve = self._resolve_cached if len(key) <= CACHE_KEY_MAX else self._resolve
        scenario = resolve(source, key)
        if scenario.cluster.num_gpus > self.max_num_gpus:
            raise TooLargeError("cluster.num_gpus", f"{scenario.cluster.num_gpus} GPUs is over the server's limit "
                                                    f"of {self.max_num_gpus} (limits.max_num_gpus)")
        return scenario

    def Predict(self, request: twin_service_pb2.PredictRequest, context: grpc.ServicerContext
                ) -> twin_service_pb2.PredictResponse:
        source, key = self._scenario_key(request)
        predict = self._predict_cached if len(key) <= CACHE_KEY_MAX else self._predict
        est, response = predict(source, key, not request.omit_fabric_report)
        if request.require_fit and not est.fits:
            # The verdict names each full tier (HBM, host DRAM, the CXL pool) with need and capacity.
            raise InfeasibleError("plan", f"{est.memory.verdict()} per GPU")
        # The same message may go to several callers at once: gRPC only serializes it.
        return response

    def _predict(self, source: str | None, key: bytes | str, report: bool
                 ) -> tuple[Estimate, twin_service_pb2.PredictResponse]:
        est = guard.evaluate(self.engine, self._scenario_of(source, key), report=report)
        response = twin_service_pb2.PredictResponse()
        convert.estimate_to_message(est, out=response.estimate)  # in place: no copy into the response
        return est, response

    def Validate(self, request: twin_service_pb2.ValidateRequest, context: grpc.ServicerContext
                 ) -> twin_service_pb2.ValidateResponse:
        try:
            scenario = self._scenario(request)
        except TwinError as err:
            violation = twin_service_pb2.Violation(field=field_of(err), description=rule_of(err),
                                                   code=code_for(err).name)
            return twin_service_pb2.ValidateResponse(valid=False, violations=[violation])
        resolved = convert.dict_to_struct(schema.dump(scenario))
        return twin_service_pb2.ValidateResponse(valid=True, resolved=resolved)

    def GetCatalog(self, request: twin_service_pb2.GetCatalogRequest, context: grpc.ServicerContext
                   ) -> twin_service_pb2.GetCatalogResponse:
        return self._catalog

    def PredictFleet(self, request: twin_service_pb2.PredictFleetRequest, context: grpc.ServicerContext
                     ) -> twin_service_pb2.PredictFleetResponse:
        if not request.fleet_document:
            raise SpecError("fleet_document", "is required (the YAML or JSON text of a fleet file)")
        mapping = parse_document(request.fleet_document, "fleet_document")
        self._check_size(mapping)
        report = evaluate_fleet(self.engine, mapping)
        return twin_service_pb2.PredictFleetResponse(name=report.name, notes=report.notes, jobs=[
            twin_service_pb2.FleetJobEstimate(
                name=j.name, first_gpu=j.placement.first, gpus=j.placement.gpus, nodes=j.placement.nodes,
                step_time_own_share_s=j.own_share.step_time_s, step_time_alone_s=j.alone.step_time_s,
                step_time_shared_s=j.shared.step_time_s, slowdown=j.slowdown,
                shared=convert.estimate_to_message(j.shared, fabric=False),
                contended=[twin_service_pb2.ContendedLink(
                    tier=c["tier"], links=c["links"], busy=c["busy"], shared_with=c["shared_with"],
                    capacity_alone=c["capacity_alone"], capacity_shared=c["capacity_shared"]) for c in j.contended])
            for j in report.jobs])


def _row_message(row: sweep_events.Row) -> sweep_service_pb2.SweepRow:
    msg = sweep_service_pb2.SweepRow(index=row.index, assignment=convert.dict_to_struct(row.assignment))
    if row.estimate is not None:
        convert.estimate_to_message(row.estimate, fabric=False, out=msg.estimate)
    elif row.error is not None:
        msg.error.CopyFrom(sweep_service_pb2.PointError(code=code_for(row.error).name, field=field_of(row.error),
                                                        description=rule_of(row.error)))
    return msg


def block_rows(block: sweep_events.RowBlock) -> list[bytes]:
    """A block's rows encoded together (``twin.wire.row_encoding``), each framed as an entry of
    ``SweepRows.rows``: what :func:`_row_message` of each of its rows would encode.
    """
    feasible = np.asarray([i for i, e in enumerate(block.errors) if e is None], np.int64)
    outcome = [b""] * len(block)
    for i, encoded in zip(feasible.tolist(), row_encoding.estimates(block.columns, feasible), strict=True):
        outcome[i] = encoded
    errors: dict[int, bytes] = {}
    for i, error in enumerate(block.errors):
        if error is not None:
            encoded = errors.get(id(error))
            if encoded is None:
                encoded = errors[id(error)] = row_encoding.error_bytes(code_for(error).name, field_of(error),
                                                                      rule_of(error))
            outcome[i] = encoded
    # Each axis's distinct values encoded once, then gathered per row.
    per_axis = []
    for path, values, codes in block.axes:
        entries = [row_encoding.assignment_entry(path, v, convert.dict_to_struct) for v in values]
        per_axis.append([entries[k] for k in codes])
    assignments = [b"".join(parts) for parts in zip(*per_axis, strict=True)] if per_axis else [b""] * len(block)
    row, framed = row_encoding.row, row_encoding.framed
    return [framed(row(index, assignment, encoded, error is None)) for index, assignment, encoded, error
            in zip(block.indices, assignments, outcome, block.errors, strict=True)]


def event_message(event: sweep_events.SweepEvent) -> sweep_service_pb2.SweepEvent:
    """A runner event as a wire event (a ``Row`` as the single-row form; the servicer chunks rows)."""
    if isinstance(event, sweep_events.Row):
        return sweep_service_pb2.SweepEvent(row=_row_message(event))
    if isinstance(event, sweep_events.Progress):
        return sweep_service_pb2.SweepEvent(progress=sweep_service_pb2.SweepProgress(
            done_points=event.done, total_points=event.total, failed_points=event.failed, elapsed_s=event.elapsed_s))
    if isinstance(event, sweep_events.Started):
        return sweep_service_pb2.SweepEvent(started=sweep_service_pb2.SweepStarted(
            name=event.name, total_points=event.total, axis_paths=event.axis_paths))
    return sweep_service_pb2.SweepEvent(finished=sweep_service_pb2.SweepFinished(
        done_points=event.done, failed_points=event.failed, elapsed_s=event.elapsed_s,
        objective_metric=event.metric, best=[_row_message(r) for r in event.best], stopped=event.stopped))


class SweepServicer:
    """twin.rpc.v1.SweepService: converts the runner's events; the runner does the work."""

    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx
        self.limits = Limits(max_items=ctx.config.limits.max_list_items)
        # A stream holds a worker thread for its whole life: leave at least one worker to the
        # unary calls and Health, whatever the configured limit.
        self.max_streams = max(1, min(ctx.config.limits.max_sweep_streams, ctx.config.workers - 1))
        self._streams = threading.BoundedSemaphore(self.max_streams)
        self._open = 0  # streams holding a slot
        self._open_lock = threading.Lock()
        # Past the bound a new stream is refused as it arrives (twin.server.admission), not on a
        # worker: 196 refused streams held the workers and a Predict took 3.6-4.2 s (issue 39).
        ctx.stream_limits[SWEEP_METHOD] = self.refusal

    def refusal(self) -> str | None:
        """Why a new stream would be refused now (every slot taken), or None."""
        if self._open < self.max_streams:
            return None
        return f"{self.max_streams} sweep streams are open (the limit); retry in a few seconds"

    def _spec(self, request: sweep_service_pb2.SweepRequest) -> Mapping[str, Any]:
        source = request.WhichOneof("spec_source")
        if source == "spec":
            return convert.sweep_spec_to_mapping(request.spec, self.limits)
        if source == "spec_document":
            return parse_document(request.spec_document, "spec_document")
        raise SpecError("spec", "is required (a structured spec or a spec_document)")

    def Sweep(self, request: sweep_service_pb2.SweepRequest, context: grpc.ServicerContext
              ) -> Iterator[sweep_service_pb2.SweepEvent]:
        chunk_rows = rows_per_message(request.rows_per_message)  # bad input first, whatever the load
        if not self._streams.acquire(blocking=False):
            context.set_trailing_metadata((("retry-after-s", str(STREAM_RETRY_S)),))
            raise TooLargeError("limits.max_sweep_streams",
                                f"{self.max_streams} sweep streams are open (the limit); retry in a few seconds")
        with self._open_lock:
            self._open += 1
        try:
            yield from self._sweep(request, context, RowChunker(chunk_rows))
        finally:
            with self._open_lock:
                self._open -= 1
            self._streams.release()

    def _sweep(self, request: sweep_service_pb2.SweepRequest, context: grpc.ServicerContext, rows: RowChunker
               ) -> Iterator[sweep_service_pb2.SweepEvent]:
        spec = self._spec(request)
        runner = self.ctx.sweep_runner
        if runner is None:  # pragma: no cover - app always sets one
            raise SpecError("spec", "this server has no sweep runner")
        ended = threading.Event()
        context.add_callback(ended.set)  # fires on cancel, deadline and completion alike

        cancel_work = self.ctx.cancel_work

        def should_stop() -> bool:
            remaining = context.time_remaining()
            return (ended.is_set() or cancel_work.is_set() or not context.is_active()
                    or (remaining is not None and remaining <= 0))

        t0 = time.perf_counter()
        done = total = 0
        name = ""
        finished = False
        failed = ""
        try:
            for event in runner(spec, should_stop):
                if isinstance(event, sweep_events.Row):
                    yield from rows.add(_row_message(event))
                    continue
                if isinstance(event, sweep_events.RowBlock):
                    yield from rows.add_encoded(block_rows(event))
                    continue
                yield from rows.flush()  # rows keep their place before progress and finished
                if isinstance(event, sweep_events.Started):
                    total, name = event.total, event.name
                    self.ctx.log.info("sweep started", extra={"sweep": event.name, "total_points": total})
                elif isinstance(event, sweep_events.Progress):
                    done = event.done
                elif isinstance(event, sweep_events.Finished):
                    done = event.done
                    finished = not event.stopped
                    if event.stopped and cancel_work.is_set():
                        yield event_message(dataclasses.replace(event, stopped="shutdown"))
                        continue
                yield event_message(event)
            yield from rows.flush()  # a runner that ends without Finished
        except Exception as err:
            failed = type(err).__name__
            yield from rows.flush()  # the rows evaluated before the error still reach the client
            raise
        finally:
            outcome = "finished" if finished else "stopped"
            reason = stop_reason(finished=finished, failed=failed, shutdown=cancel_work.is_set(),
                                 remaining_s=context.time_remaining())
            self.ctx.log.info(f"sweep {outcome}", extra={
                "sweep": name, "done_points": done, "total_points": total,
                "elapsed_s": round(time.perf_counter() - t0, 3), "reason": reason})
