"""What the web view reads from the running twin, in one place: the telemetry service's live state,
its jobs and predictions and their stored history over time, the failure analyzer.

Every method here is synchronous and may evaluate the model: the routes call them in worker
threads (``starlette.concurrency.run_in_threadpool``), never on the event loop. The telemetry
service is the very object the gRPC TelemetryService answers from (``ctx.extras["telemetry"]``),
so the page and ``twin telemetry status`` always agree.
"""

from __future__ import annotations

import threading
from typing import Any

from twin.core.errors import NotFoundError, SpecError
from twin.engine import Engine
from twin.failure_analyzer import FailureAnalyzer
from twin.web import fabric_picture, views

# Samples the Step page draws per job (the latest of the stored history, twin.telemetry.store.HISTORY_PER_JOB):
# 1,000 points, a chart's worth (4 h at the 15 s default period while the numbers move).
HISTORY = 1000


class Live:
    """The running twin as the pages see it (``telemetry``: None when the server has no telemetry)."""

    def __init__(self, engine: Engine, telemetry: Any) -> None:
        self.engine = engine
        self.telemetry = telemetry
        self.analyzer = FailureAnalyzer(engine)
        self._lock = threading.Lock()
        self._failures: dict[str, tuple[Any, dict[str, Any]]] = {}
        self._fabric: dict[str, tuple[Any, fabric_picture.Layout]] = {}

    # ------------------------------------------------------------ what changed
    def version(self) -> tuple[Any, ...]:
        """A value that changes whenever telemetry changes anything the pages show."""
        t = self.telemetry
        if t is None:
            return ()
        with t.lock:
            return (t.stats["requests"], t.stats["points_accepted"], len(t.state.events),
                    len(t.jobs), id(t.calibration))

    def _require(self) -> Any:
        if self.telemetry is None:
            raise SpecError("telemetry", "this server runs without live telemetry (no telemetry service)")
        return self.telemetry

    def jobs(self) -> list[str]:
        """Registered jobs, by name."""
        t = self.telemetry
        if t is None:
            return []
        with t.lock:
            return sorted(t.jobs)

    def job(self, name: str) -> tuple[str, Any]:
        """(name, scenario) of job ``name``, or of the first registered job when ``name`` is empty."""
        t = self._require()
        with t.lock:
            jobs = dict(t.jobs)
        if not jobs:
            raise NotFoundError("job", name or "(any)", [])
        name = name or sorted(jobs)[0]
        if name not in jobs:
            raise NotFoundError("job", name, sorted(jobs))
        return name, jobs[name]

    # ------------------------------------------------------------ pages
    def layout(self, name: str, scenario: Any) -> fabric_picture.Layout:
        """The job's fabric layout (evaluated once per scenario)."""
        with self._lock:
            cached = self._fabric.get(name)
        if cached is not None and cached[0] is scenario:
            return cached[1]
        est = self.engine.evaluate(scenario, validate=False, report=True)
        c = scenario.cluster
        layout = fabric_picture.layout_of(scenario.name or name, c.num_gpus, c.gpus_per_node, c.nics_per_node,
                                    est.to_dict()["fabric"])
        with self._lock:
            self._fabric[name] = (scenario, layout)
        return layout

    def fabric(self, job: str, at: str) -> dict[str, Any]:
        """The Fabric page: one view of the topology, live state on it, the failed and degraded parts."""
        name, scenario = self.job(job)
        layout = self.layout(name, scenario)
        state = self._require().live_state(max_events=50)
        comps = state["components"]
        placement = fabric_picture.place(comps, layout.nodes)
        shown = fabric_picture.view(layout, placement, fabric_picture.parse_at(at, layout))
        bad = [c for c in comps if c.get("state") in ("down", "degraded")]
        bad.sort(key=lambda c: (-fabric_picture.RANK[c["state"]], fabric_picture.natural_key(c["id"])))
        counts: dict[str, dict[str, int]] = {}
        for c in comps:
            per = counts.setdefault(c.get("kind", ""), {})
            per[c["state"]] = per.get(c["state"], 0) + 1
        return views.clean({"job": name, "jobs": self.jobs(), "view": shown, "summary": fabric_picture.summary(layout),
                            "problems": bad, "counts": counts, "switches": state["switches"],
                            "tiers": state["tiers"], "events": state["events"][::-1],
                            "unplaced": [c["id"] for c in placement.unplaced],
                            "placement": "hosts on nodes in the natural order of their names; ports and GPUs on "
                                         "rails by the number their device or GPU label ends with"})

    def step(self, job: str) -> dict[str, Any]:
        """The Step page for ``job``: its history is the telemetry service's stored one (sampled every
        ``telemetry.history_interval_s`` and when the page looks; it survives a restart).
        """
        t = self._require()
        name, _ = self.job(job)
        predicted = t.predict(job=name)
        divergence = t.divergence()
        t.record_history()
        history = [{"t": h["time_ns"] / 1e9, "observed_s": h["observed_s"], "now_s": h["now_s"],
                    "designed_s": h["designed_s"]} for h in t.history(name, HISTORY).get(name, ())]
        out = views.step_view(predicted, divergence, name, t.calibration_state(), history)
        out["jobs"] = self.jobs()
        return out

    def sample(self) -> None:
        """Store each job's predictions and last observation now, where they moved since the last sample."""
        if self.telemetry is not None:
            self.telemetry.record_history()

    def failures(self, job: str) -> dict[str, Any]:
        """The Failures page for ``job``'s scenario (analysed once per scenario)."""
        name, scenario = self.job(job)
        with self._lock:
            cached = self._failures.get(name)
        if cached is not None and cached[0] is scenario:
            data = cached[1]
        else:
            data = views.failures_view(self.analyzer.analyze(scenario, rank=True).to_dict())
            with self._lock:
                self._failures[name] = (scenario, data)
        return {**data, "job": name, "jobs": self.jobs()}
