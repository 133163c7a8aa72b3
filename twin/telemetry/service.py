"""The telemetry capability: live state, persistence, predictions and calibration.

One :class:`TelemetryService` per server. The OTLP receiver (``otlp.py``) feeds
:meth:`TelemetryService.ingest`; the API servicer (``api.py``) reads it. Everything it
knows is in SQLite under the state directory and is reloaded identically on start.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

from twin.core import calibration as calib
from twin.core.docload import parse_document
from twin.core.errors import NotFoundError, SpecError, TooLargeError, TwinError
from twin.core.extras import needs_extra
from twin.core.failures.failure_spec import FailureSpec, load_failure_spec
from twin.core.fault_kinds import Fault
from twin.core.health import TierStatus, tier_status
from twin.core.intervals import narrowed
from twin.core.specs import Calibration, Scenario
from twin.engine import Engine
from twin.telemetry import live_predict
from twin.telemetry.decode import Decoder, summarize
from twin.telemetry.ingest import DecodeSlots, IngestQueue, Item, Overloaded
from twin.telemetry.job_live import (
    JobLive,
    PartIndex,
    host_attributes,
    index_parts,
    interruption_cost,
    job_live,
    job_parts,
)
from twin.telemetry.mapping import MetricCatalog
from twin.telemetry.placement import Placement, parse_placement, unplaced
from twin.telemetry.state import ApplyResult, Dirty, LiveState, Undo
from twin.telemetry.store import HISTORY_PER_JOB, Store
from twin.telemetry.telemetry_config import TelemetryConfig

log = logging.getLogger(__name__)
# Distinct ignored metric names remembered (memory bound; the rest pool into one row).
MAX_IGNORED = 10_000
# Decode-time reasons that make a request "bad data" (INVALID_ARGUMENT when nothing in it
# is usable); unknown metrics and unused data types are valid OTLP the twin just ignores.
# Jobs a twin tracks, and how long a job name may be (each registered job is re-evaluated by
# GetDivergence and Calibrate: the bound keeps those calls bounded too).
MAX_JOBS = 1000
# Where a job's placement is kept in its stored scenario mapping (taken out before the scenario loads).
PLACEMENT_KEY = "twin.placement"
MAX_JOB_NAME = 256
# Requests decoding at once, and waiting for that: see twin.telemetry.ingest.DecodeSlots. Two: one
# decodes while the other's thread is between its reads and writes (as limits.model_workers does
# for Predict); eight waiting are a few hundred ms of decoding at most, past which an exporter is
# told to retry (its backoff spreads the load) rather than queued behind.
DECODE_SLOTS = 2
MAX_DECODE_WAITING = 8
INVALID_REASONS = ("non-finite value", "negative counter", "without a value", "without a timestamp",
                   "timestamp beyond", "timestamp in the future",
                   "missing identifying attribute", "delta sum for a gauge", "attributes on a data point")


class InvalidData(Exception):
    """Nothing in the request is usable and it is malformed: not retryable."""


class TelemetryService:
    """Live telemetry state, its store, the ingest writer, predictions and calibration."""

    def __init__(self, engine: Engine, config: TelemetryConfig, *, meter_provider: Any = None,
                 metrics_token: str | None = None, metrics_ssl: Any = None) -> None:
        """``metrics_token``/``metrics_ssl``: the bearer token and ``ssl.SSLContext`` of the Prometheus
        ``/metrics`` endpoint (``config.metrics_address``; the main port's, under ``twin serve``).
        """
        config.validate()
        self.engine = engine
        self.config = config
        self.catalog = MetricCatalog.from_plugins(engine.pm)
        self.decoder = Decoder(self.catalog, memo_limit=2 * config.max_series)
        self.store = Store(config.db_path, config.synchronous)
        self.state = LiveState(self.catalog, max_series=config.max_series, max_components=config.max_components,
                               degrade_after=config.degrade_after, recover_after=config.recover_after)
        self.lock = threading.RLock()
        self.state.restore(self.store.load_series(), self.store.load_components(), self.store.load_observations(),
                           self.store.load_events())
        cal, _ = self.store.load_calibration()
        self.calibration = cal or Calibration(source="as designed")
        self.jobs: dict[str, Scenario] = {}
        # Each job's placement (None: registered without one) and failures section.
        self.placements: dict[str, Placement | None] = {}
        self.failure_specs: dict[str, FailureSpec] = {}
        for job, mapping in self.store.load_jobs().items():
            try:
                placement = parse_placement(mapping.pop(PLACEMENT_KEY, None))
                self.jobs[job] = engine.scenario(mapping)
                self.placements[job] = placement
                self.failure_specs[job] = load_failure_spec(mapping.get("failures"))
            except TwinError as err:  # a plugin went missing since it was registered
                log.warning("registered job %r no longer evaluates: %s", job, err)
        # Why each job's steps were last kept out of the fit (job -> reason; absent: used).
        self.skipped: dict[str, str] = self.store.load_skipped()
        skipped = self.store.skipped + self.state.skipped
        if skipped:
            log.warning("telemetry state: %d stored rows could not be used and were skipped (kept in %s)",
                        len(skipped), config.db_path, extra={"skipped": [list(r) for r in skipped[:20]]})
        self.stats = {"points_accepted": 0, "points_rejected": 0, "points_duplicate": 0, "counter_resets": 0,
                      "requests": 0, "stored_rows_skipped": len(skipped), "stale_markers_skipped": 0}
        # Metrics the twin does not read, per (name, exporter): [points, reason, first, last ns].
        self.ignored: dict[tuple[str, str], list[Any]] = {}
        # Series baselines (last counter values) are written every series_checkpoint_s, not
        # with every batch: after a crash a counter's next rate is then taken over a longer
        # interval, which is still its true average rate. Component state, observations and
        # events are written with every batch before it is acknowledged.
        self._unsaved_series: set[str] = set()  # series texts
        self._next_checkpoint = 0.0
        self.queue = IngestQueue(self._apply_batch, config.max_pending_points, config.retry_after_s)
        self.slots = DecodeSlots(DECODE_SLOTS, MAX_DECODE_WAITING, config.retry_after_s)
        self._stop = threading.Event()
        # Each job's last stored history sample (designed, now, observed), so a sample is stored only
        # when one of them moved; from the store, so a restart does not repeat the last one.
        self._history_lock = threading.Lock()
        self._history_last = {job: (rows[-1]["designed_s"], rows[-1]["now_s"], rows[-1]["observed_s"])
                              for job, rows in self.store.load_history(limit=1).items()}
        self._historian: threading.Thread | None = None
        if config.history_interval_s > 0:
            self._historian = threading.Thread(target=self._history_loop, name="twin-telemetry-history", daemon=True)
            self._historian.start()
        self._calibrator: threading.Thread | None = None
        if config.calibrate_interval_s > 0:
            self._calibrator = threading.Thread(target=self._calibrate_loop, name="twin-telemetry-calibrate",
                                                daemon=True)
            self._calibrator.start()
        self.self_metrics = None
        if meter_provider is not None or config.self_metrics_endpoint:
            with needs_extra("telemetry", "the twin's own metrics over OTLP", field="telemetry.self_metrics_endpoint"):
                from twin.telemetry.selfmetrics import SelfMetrics

                self.self_metrics = SelfMetrics(self, meter_provider, config)
        from twin.telemetry.scrape import Scraper, scrape_targets

        self.scraper = Scraper(self.ingest, scrape_targets(list(config.scrape)), config.max_receive_bytes,
                               known=lambda name: self.catalog.lookup(name) is not None)
        self.metrics_endpoint = None
        # The last answer of divergence() / the last fit inputs of calibrate(), with the key of
        # what they were computed from (see _inputs): polling clients do not re-evaluate every job.
        self._divergence_cache: tuple[tuple[Any, ...], list[dict[str, Any]]] | None = None
        self._job_rows: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {}  # job -> (its inputs, its row)
        self._fit_cache: tuple[tuple[Any, ...], tuple[list[Any], dict[str, str], float]] | None = None
        # (parts_version, the parts index, JobLive per (placement id, NICs a node)): see job_live.
        self._parts_cache: tuple[int, PartIndex, dict[tuple[int, int], tuple[Any, JobLive]]] | None = None
        self.otlp_grpc_address: str | None = None  # the dedicated OTLP/gRPC port, once bound (extension.attach)
        if config.metrics_address:
            with needs_extra("telemetry", "Prometheus /metrics out", field="telemetry.metrics_address"):
                from twin.telemetry.promexport import MetricsEndpoint
            self.metrics_endpoint = MetricsEndpoint(self, config.metrics_address, metrics_token, metrics_ssl)
            log.info("Prometheus metrics on %s", self.metrics_endpoint.url)

    # ---------------------------------------------------------------- ingest
    def ingest(self, request: ExportMetricsServiceRequest, timeout: float | None = None) -> tuple[int, str]:
        """Apply one OTLP request; returns (rejected points, message) once it is committed.

        ``timeout``: seconds for all of it, decoding included (None: no limit). Raises
        :class:`Overloaded` (retry later), :class:`InvalidData` (do not retry), or a
        ``TimeoutError`` (:class:`~twin.telemetry.decode.DecodeDeadline` while decoding,
        ``concurrent.futures.TimeoutError`` waiting for the commit).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        future = None
        self.queue.check_room()
        with self.slots.hold(deadline):  # the commit is waited for outside: it takes no CPU here
            decoded = self.decoder.decode(request, deadline)
            if decoded.ignored:
                self.note_ignored(decoded.ignored)
            reasons, examples = dict(decoded.rejected), dict(decoded.examples)
            if not decoded.count and decoded.rejected and all(any(k in r for k in INVALID_REASONS) for r in reasons):
                with self.lock:
                    self.stats["requests"] += 1
                    self.stats["points_rejected"] += decoded.rejected_count
                raise InvalidData(summarize(reasons, examples))
            if decoded.count:
                future = self.queue.submit(decoded.points, decoded.count)
        applied = ApplyResult()
        if future is not None:
            applied = future.result(None if deadline is None else max(0.0, deadline - time.monotonic()))
        for r, n in applied.reasons.items():
            reasons[r] = reasons.get(r, 0) + n
        rejected = decoded.rejected_count + applied.rejected
        with self.lock:
            self.stats["requests"] += 1
            self.stats["points_rejected"] += rejected
        return rejected, summarize(reasons, examples) if reasons else ""

    def count(self, counter: str, n: int) -> None:
        """Add ``n`` to ingest counter ``counter`` (one of :attr:`stats`): for what a receiver
        settles before decoding (remote-write stale markers, samples refused on their labels).
        """
        with self.lock:
            if counter not in self.stats:
                raise KeyError(f"no ingest counter {counter!r}")
            self.stats[counter] += n

    def note_ignored(self, ignored: dict[tuple[str, str], tuple[int, str]]) -> None:
        """Count metrics nobody reads, per (name, exporter): (points, reason) (bounded: past
        MAX_IGNORED names they pool under ``(other names)``); log each name once.
        """
        now = time.time_ns()
        fresh = []
        with self.lock:
            for (name, exporter), (n, reason) in ignored.items():
                key = (name, exporter)
                row = self.ignored.get(key)
                if row is None:
                    if len(self.ignored) >= MAX_IGNORED:
                        key = ("(other names)", "")
                        row = self.ignored.get(key)
                    if row is None:
                        row = self.ignored[key] = [0, reason, now, now]
                        fresh.append(key)
                row[0] += n
                row[3] = now
        for name, exporter in fresh:
            log.warning("ignoring metric %r from %r: %s (counted; TelemetryService/GetIgnoredMetrics lists them)",
                        name, exporter or "?", self.ignored[(name, exporter)][1])

    def ignored_metrics(self) -> list[dict[str, Any]]:
        """Metrics received but not read, most points first."""
        with self.lock:
            rows = [{"name": k[0], "exporter": k[1], "points": v[0], "reason": v[1], "first_seen_ns": v[2],
                     "last_seen_ns": v[3]} for k, v in self.ignored.items()]
        return sorted(rows, key=lambda r: (-r["points"], r["name"]))

    def _apply_batch(self, items: list[Item]) -> None:
        now = time.time_ns()
        # The series changed are added straight to the unsaved set (the checkpoint writes them).
        dirty = Dirty(series=self._unsaved_series)
        # How to take the batch back if it does not commit: only acknowledged points are live.
        undo = Undo()
        results = []
        with self.lock:
            try:
                for it in items:
                    res = ApplyResult()
                    self.state.apply(it.points, now, res, dirty, undo)
                    results.append(res)
            except BaseException:
                self.state.rollback(undo)
                raise
            components = self.state.components
            live = [components[c] for c in dirty.components if c in components]
            records = [components[c] for c in dirty.records if c in components]
            series = []
            if time.monotonic() >= self._next_checkpoint:
                series = [(k, self.state.series[k]) for k in self._unsaved_series if k in self.state.series]
                self._unsaved_series = set()
                self._next_checkpoint = time.monotonic() + self.config.series_checkpoint_s
        try:
            self.store.commit_batch(series, records, live, dirty.observations, dirty.events)
        except Exception:
            # Not stored, so not acknowledged: the batch is taken back (its exporters get the error
            # and resend it, now new points again), and the baselines this commit would have
            # checkpointed are written by the next one.
            with self.lock:
                self.state.rollback(undo)
                self._unsaved_series |= {k for k, _ in series}
                self._unsaved_series.difference_update(undo.new_series)
                self._next_checkpoint = 0.0
            raise
        with self.lock:
            # Counted once stored: a batch whose commit fails is not counted (its exporter's
            # retry is, when it commits).
            for r in results:
                self.stats["points_accepted"] += r.accepted
                self.stats["points_duplicate"] += r.duplicates
                self.stats["counter_resets"] += r.resets
        for it, res in zip(items, results, strict=True):
            it.future.set_result(res)

    # ---------------------------------------------------------------- reading
    def tiers(self) -> dict[str, TierStatus]:
        """Usable fraction of each tier now."""
        with self.lock:
            views = [c.view() for c in self.state.components.values()]
        return tier_status(views)

    def live_state(self, kinds: tuple[str, ...] = (), states: tuple[str, ...] = (),
                   max_events: int = 100) -> dict[str, Any]:
        """Components, switches, tier capacities, recent events and ingest counters."""
        with self.lock:
            comps = self.state.snapshot(kinds, states)
            switches = self.state.switches()
            events = list(self.state.events)[-max_events:] if max_events > 0 else []
            stats = dict(self.stats, requests_refused_overloaded=self.queue.refused,
                         series=len(self.state.series), components=len(self.state.components))
        return {"components": comps, "switches": switches, "unplaced_hosts": self.unplaced_hosts(),
                "tiers": [_tier_dict(t) for t in self.tiers().values()],
                "events": [{"time_ns": t, "component": c, "old": o, "new": n, "why": w} for t, c, o, n, w in events],
                "ingest": stats}

    # ---------------------------------------------------------------- jobs and predictions
    def parse_scenario(self, text: str, field: str = "scenario_yaml") -> tuple[Scenario, dict[str, Any]]:
        """A scenario from YAML/JSON text, errors naming ``field``."""
        data = parse_document(text, field, allow_aliases=False) if text.strip() else None
        if not isinstance(data, dict):
            raise SpecError(field, "must be a scenario mapping (cluster, model, plan)")
        return self.engine.scenario(data), data

    def register_job(self, job: str, text: str, placement: Any = None) -> float:
        """Remember which scenario ``job`` runs and where (``placement``: plain data for
        :func:`twin.telemetry.placement.parse_placement`, None: unknown); returns its designed step time.
        """
        if not job.strip():
            raise SpecError("job", "must not be empty")
        if len(job) > MAX_JOB_NAME or not job.isprintable():
            raise SpecError("job", f"must be at most {MAX_JOB_NAME} printable characters (got {len(job):,})")
        with self.lock:
            full = job not in self.jobs and len(self.jobs) >= MAX_JOBS
        if full:
            raise TooLargeError("job", f"{MAX_JOBS:,} jobs are registered already; re-register an existing name")
        where = parse_placement(placement)
        scn, data = self.parse_scenario(text)
        spec = load_failure_spec(data.get("failures"), "scenario_yaml.failures")
        step = self.engine.evaluate(scn, validate=False, report=False).step_time_s
        stored = {**data, PLACEMENT_KEY: where.to_dict()} if where is not None else data
        self.store.save_job(job, stored, time.time_ns())
        with self.lock:
            self.jobs[job] = scn
            self.placements[job] = where
            self.failure_specs[job] = spec
        return step

    def job_live(self, placement: Placement | None, scn: Scenario) -> JobLive:
        """The conditions of a job placed at ``placement`` (None: every part) running ``scn``.

        Kept until a component changes (``LiveState.parts_version``): jobs on the same placement
        (every job registered without one sees every part) and with as many NICs a node (all
        that job_live reads of the scenario) share one; each read cost one pass over every part
        per placement under the ingest lock (1,000 jobs x 50,000 parts made a read cost seconds,
        and the fuzz's reads slowed it from 581 to 227 requests/s over its first 90,000).
        """
        with self.lock:
            index, memo = self._parts_index()
            k = (id(placement), scn.cluster.nics_per_node or 1)
            hit = memo.get(k)
            if hit is not None and hit[0] is placement:  # the memo holds the placement: its id is not reused
                return hit[1]
            parts, outside = job_parts(index, placement)
            live = job_live(parts, outside, placement, scn)
            memo[k] = (placement, live)
            return live

    def _parts_index(self) -> tuple[PartIndex, dict[tuple[int, int], tuple[Placement | None, JobLive]]]:
        """The parts grouped by host and tier, and the JobLive memo, of the components as they are
        now (rebuilt when ``parts_version`` moved; call under the lock).
        """
        version = self.state.parts_version
        cache = self._parts_cache
        if cache is None or cache[0] != version:
            cache = self._parts_cache = (version, index_parts(self.state.components.values()), {})
        return cache[1], cache[2]

    def ranked_hosts(self, job: str) -> list[str]:
        """A registered job's hosts the twin has telemetry from, in rank order ([] without a placement)."""
        with self.lock:
            where = self.placements.get(job)
            if where is None:
                return []
            return where.ranked(host_attributes(self._parts_index()[0]))[0]

    def unplaced_hosts(self) -> list[str]:
        """Hosts reporting parts that no registered job's placement owns."""
        with self.lock:
            attrs = host_attributes(self._parts_index()[0])
            placements = [p for p in self.placements.values() if p is not None]
        return unplaced(attrs, placements, attrs)

    def _scenario_for(self, job: str, text: str) -> tuple[Scenario, Placement | None, FailureSpec]:
        if job:
            with self.lock:
                scn = self.jobs.get(job)
                known = sorted(self.jobs)
                where, spec = self.placements.get(job), self.failure_specs.get(job, FailureSpec())
            if scn is None:
                raise NotFoundError("job", job, known)
            return scn, where, spec
        if not text.strip():
            raise SpecError("job", "give a registered job or scenario_yaml")
        scn, data = self.parse_scenario(text)
        return scn, None, load_failure_spec(data.get("failures"), "scenario_yaml.failures")

    def predict(self, job: str = "", text: str = "", basis: str = "both") -> dict[str, Any]:
        """Step time as designed and/or now from the job's own parts, with its faults by kind,
        interruptions and their goodput cost, its placement, and whether the fit uses its steps.
        """
        scn, where, spec = self._scenario_for(job, text)
        live = self.job_live(where, scn)
        tiers = live.tiers()
        with self.lock:
            fitted = self.calibration
            skipped = self.skipped.get(job, "") if job else "not a registered job"
        out: dict[str, Any] = {"tiers": [_tier_dict(t) for t in tiers.values()],
                               "down_components": list(live.down), "degraded_components": list(live.degraded),
                               "notes": [*live.notes, f"placement: {live.ranked_by}"],
                               "faults": [_fault_dict(f, scn, spec, live.hosts) for f in live.faults],
                               "placement": {**(where.to_dict() if where is not None else {}),
                                             "known": live.placement_known, "ranked_hosts": list(live.hosts),
                                             "ranked_by": live.ranked_by, "parts": live.parts,
                                             "parts_outside": live.outside},
                               "calibration_skipped": skipped}
        costs = [f["interruption"] for f in out["faults"] if f.get("interruption")]
        out["interrupted"] = bool(costs)
        out["interruption_cost_s"] = sum(c["cost_s"] for c in costs)
        out["goodput_lost_gpu_hours"] = sum(c["gpu_hours"] for c in costs)
        for c in costs[:1]:
            out["notes"].append(f"interruption: {c['cost_s']:.0f} s lost per restart ({c['lost_work_s']:.0f} s of work "
                                f"since the checkpoint + {c['restart_s']:.0f} s restart), {c['gpu_hours']:.0f} "
                                f"GPU-hours; {c['formula']}")
        if skipped:
            out["notes"].append(f"calibration: this job's steps are not learned from now: {skipped}")
        cond = live_predict.now_conditions(scn, fitted, live)
        now_cal = cond.calibration
        out["now_calibration"] = _cal_dict(now_cal)
        if basis in ("both", "designed"):
            est = self.engine.evaluate(scn, validate=False)
            out["designed"] = est.to_dict()
            out["designed_step_time_s"] = est.step_time_s
        if basis in ("both", "now"):
            est = live_predict.evaluate_with(self.engine, scn, cond)
            if job and est.interval is not None:  # the job's own steps narrow how sure "now" is
                with self.lock:
                    seen = [v for _, v in list(self.state.observations.get(job, ()))[-live_predict.WINDOW:]]
                est = dataclasses.replace(est, interval=narrowed(est.interval, est.step_time_s, seen))
            out["now"] = est.to_dict()
            out["now_step_time_s"] = est.step_time_s
        if basis == "both":
            out["slowdown"] = out["now_step_time_s"] / out["designed_step_time_s"] - 1
        return out

    def _inputs(self) -> tuple[dict[str, Scenario], dict[str, list[tuple[int, float]]], Calibration,
                               dict[str, JobLive], tuple[Any, ...]]:
        """Jobs, observations, fitted calibration and each job's live conditions, and a key that
        changes with any of them.

        The key holds the scenario objects themselves (so an id is never reused while the key
        lives) and each job's observation count and last point (observations only grow at
        the end); comparing it to the last one is an identity check per job when nothing moved.
        """
        with self.lock:
            jobs, fitted, where = dict(self.jobs), self.calibration, dict(self.placements)
            obs = {j: list(self.state.observations.get(j, ())) for j in jobs}
            lives = {j: self.job_live(where.get(j), scn) for j, scn in jobs.items()}
        # One key per distinct JobLive (jobs share them): a key walks the job's faults, and the
        # open placement's are every fault of the fleet (17% of the fuzz's GIL time, per job).
        distinct = {id(lv): lv for lv in lives.values()}
        live_keys = {i: lv.key() for i, lv in distinct.items()}
        key = (tuple(sorted(jobs.items(), key=lambda kv: kv[0])),
               tuple((j, len(o), o[-1] if o else None) for j, o in sorted(obs.items())), fitted,
               tuple((j, live_keys[id(lv)]) for j, lv in sorted(lives.items())))
        return jobs, obs, fitted, lives, key

    def divergence(self) -> list[dict[str, Any]]:
        """Observed vs predicted step time of every registered job (re-evaluated only when a job,
        an observation, the calibration or a tier's state changed since the last call).
        """
        jobs, obs, fitted, lives, key = self._inputs()
        cached = self._divergence_cache
        if cached is not None and cached[0] == key:
            return [dict(row) for row in cached[1]]
        # Per job, what its row depends on (taken from the key: its scenario, its observations'
        # count and last point, the calibration, its live key): only the jobs whose own inputs
        # moved are evaluated again (a change on one host re-evaluated every registered job).
        seen = {j: (n, last) for j, n, last in key[1]}
        live_keys = dict(key[3])
        own = {j: (scn, seen[j], fitted, live_keys[j]) for j, scn in jobs.items()}
        previous = self._job_rows
        stale = {j: scn for j, scn in jobs.items() if j not in previous or previous[j][0] != own[j]}
        fresh = {v.job: v.to_dict() for v in live_predict.job_views(self.engine, stale, obs, fitted, lives)}
        self._job_rows = {j: (own[j], fresh[j] if j in fresh else previous[j][1]) for j in jobs}
        rows = [self._job_rows[j][1] for j in sorted(jobs)]
        self._divergence_cache = (key, rows)
        return [dict(row) for row in rows]

    # ---------------------------------------------------------------- history
    def record_history(self) -> int:
        """Store each job's predicted (designed, now) and observed step time now, for the jobs where one
        moved since its last stored sample; how many samples were stored.
        """
        rows = self.divergence()
        now = time.time_ns()
        with self._history_lock:
            new = []
            for r in rows:
                point = (r["predicted_designed_s"], r["predicted_now_s"],
                         r["observed_step_time_s"] if r.get("observations") else None)
                if all(v is None or math.isfinite(v) for v in point) and self._history_last.get(r["job"]) != point:
                    new.append((r["job"], now, *point))
            self.store.save_history(new)
            for job, _, *point in new:
                self._history_last[job] = tuple(point)
        return len(new)

    def history(self, job: str | None = None, limit: int = HISTORY_PER_JOB) -> dict[str, list[dict[str, Any]]]:
        """The stored step-time history (``Store.load_history``): the latest ``limit`` samples a job."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 0 <= limit <= HISTORY_PER_JOB:
            raise SpecError("history_points", f"must be a whole number in [0, {HISTORY_PER_JOB}] (got {limit!r})")
        return self.store.load_history(job, limit) if limit else {}

    def _history_loop(self) -> None:
        while not self._stop.wait(self.config.history_interval_s):
            try:
                self.record_history()
            except TwinError as err:
                log.warning("step-time history sample skipped: %s", err)
            except Exception:  # keep the loop alive; the next period samples again
                log.exception("step-time history sample failed")

    # ---------------------------------------------------------------- calibration
    def calibrate(self) -> dict[str, Any]:
        """Fit the calibration to the observations of jobs whose own parts are healthy and placed;
        persist the change and its reasons; record why each other job was skipped.
        """
        jobs, obs, fitted, lives, key = self._inputs()
        cached = self._fit_cache
        if cached is not None and cached[0] == key:
            inputs, skipped, ceiling = cached[1]
        else:
            inputs, skipped, ceiling = live_predict.fit_inputs(self.engine, jobs, obs, fitted, lives,
                                                               self.config.min_observations)
            self._fit_cache = (key, (inputs, skipped, ceiling))
        with self.lock:
            changed, self.skipped = skipped != self.skipped, dict(skipped)
        if changed:
            self.store.save_skipped(skipped)
        new, adjustments = calib.fit(fitted, inputs, self.config.fit, {"compute_efficiency": ceiling})
        now = time.time_ns()
        if adjustments:
            self.store.save_calibration(new, adjustments, now)
            with self.lock:
                self.calibration = new
        _, history = self.store.load_calibration()
        made = history[len(history) - len(adjustments):] if adjustments else []
        return {"calibration": _cal_dict(new), "adjustments": made, "compute_ceiling": ceiling,
                "skipped": [{"job": j, "reason": r} for j, r in sorted(skipped.items())],
                "jobs": [{"job": o.job, "observed_step_time_s": o.observed_s, "predicted_now_s": o.predicted_s,
                          "divergence_now": o.observed_s / o.predicted_s - 1, "sensitivity": dict(o.sensitivity)}
                         for o in inputs]}

    def calibration_state(self) -> dict[str, Any]:
        """The current calibration and its whole history."""
        cal, history = self.store.load_calibration()
        with self.lock:
            skipped = sorted(self.skipped.items())
        return {"calibration": _cal_dict(cal or self.calibration), "history": history,
                "skipped": [{"job": j, "reason": r} for j, r in skipped]}

    def _calibrate_loop(self) -> None:
        while not self._stop.wait(self.config.calibrate_interval_s):
            try:
                self.calibrate()
            except TwinError as err:
                log.warning("automatic calibration skipped: %s", err)
            except Exception:  # keep the loop alive; the next period retries
                log.exception("automatic calibration failed")

    # ---------------------------------------------------------------- lifecycle
    def close(self) -> None:
        """Apply what is queued, stop the threads, close the store."""
        self._stop.set()
        if self._historian is not None:  # a sample in flight writes before the store closes
            self._historian.join(timeout=30)
        self.scraper.close()
        self.queue.close()
        with self.lock:
            series = [(k, self.state.series[k]) for k in self._unsaved_series if k in self.state.series]
            self._unsaved_series = set()
        self.store.commit_batch(series, [], [], [], [])
        if self.self_metrics is not None:
            self.self_metrics.shutdown()
        if self.metrics_endpoint is not None:
            self.metrics_endpoint.close()
        self.store.close()


def _tier_dict(t: TierStatus) -> dict[str, Any]:
    return {"tier": t.tier, "capacity": t.capacity, "limited_by": t.limited_by, "down": list(t.down),
            "degraded": list(t.degraded), "notes": list(t.notes)}


def _fault_dict(f: Fault, scn: Scenario, spec: FailureSpec, hosts: tuple[str, ...]) -> dict[str, Any]:
    """A fault as plain data, with its node rank (the placement's; -1 without one) and, for a GPU
    named by its index, its global rank (node rank x GPUs per node + index); an interruption's cost.
    """
    node = hosts.index(f.host) if f.host in hosts else -1
    index = f.component.rsplit(":", 1)[-1]
    gpu = node * scn.cluster.gpus_per_node + int(index) if f.kind == "gpu" and node >= 0 and index.isdigit() else -1
    out = {"component": f.component, "host": f.host, "kind": f.kind, "consequence": f.consequence,
           "evidence": f.evidence, "factor": f.factor, "why": f.what, "source": f.source, "node_rank": node,
           "gpu_rank": gpu}
    if f.consequence == "interruption":
        out["interruption"] = interruption_cost(scn, spec, f.restart_in_place)
    return out


def _cal_dict(c: Calibration) -> dict[str, Any]:
    return {"compute_efficiency": c.compute_efficiency, "scale_up_bandwidth": c.scale_up_bandwidth,
            "scale_out_bandwidth": c.scale_out_bandwidth, "source": c.source}


__all__ = ["InvalidData", "Overloaded", "TelemetryService"]
