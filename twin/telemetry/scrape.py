"""Prometheus in: scrape exposition endpoints (dcgm-exporter, node_exporter, ...) directly.

Where no OpenTelemetry Collector sits in front of the exporters, the twin reads their
``/metrics`` pages itself: every ``interval_s`` each target (``telemetry.scrape``) is fetched,
parsed with ``prometheus_client``'s text-format parser (the Prometheus project's own
client library), turned into the OTLP request a Collector's Prometheus receiver would send
(counters as cumulative monotonic sums, gauges and untyped samples as gauges; the resource's
``host.name`` is the target's ``host``, its ``service.name`` the target's ``job``) and
ingested through the same mapping, limits and state as OTLP. Histogram and summary families
are not read (no mapping uses them). A target that fails (refused, timeout, a bad page) is
logged once per failure streak and counted; it never stops the others.
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from twin.core.errors import SpecError
from twin.core.extras import needs_extra
from twin.telemetry.otlpbuild import request

log = logging.getLogger(__name__)

# Prometheus' default scrape interval and timeout (prometheus.io/docs/prometheus/latest/configuration).
DEFAULT_INTERVAL_S = 60.0
DEFAULT_TIMEOUT_S = 10.0
_READ = {"counter": "sum", "gauge": "gauge", "unknown": "gauge", "untyped": "gauge"}


@dataclass(frozen=True, slots=True)
class ScrapeTarget:
    """One exposition endpoint: its URL, how often, and who it is."""

    url: str
    interval_s: float = DEFAULT_INTERVAL_S
    timeout_s: float = DEFAULT_TIMEOUT_S
    host: str = ""
    job: str = ""


def _parser(path: str = "telemetry.scrape") -> Callable[[str], Any]:
    """prometheus_client's text parser (the 'telemetry' extra; imported only when there are targets)."""
    with needs_extra("telemetry", "Prometheus scraping", field=path):
        from prometheus_client.parser import text_string_to_metric_families
    return text_string_to_metric_families


def scrape_targets(data: Any, path: str = "telemetry.scrape") -> tuple[ScrapeTarget, ...]:
    """Targets from their settings (a list of mappings with ``url``); errors name the field.

    With any target, the parser must be installed: a missing extra is an error at start, not
    at the first scrape.
    """
    if data is None:
        return ()
    if not isinstance(data, Sequence) or isinstance(data, str):
        raise SpecError(path, f"must be a list of targets {{url, interval_s, timeout_s, host, job}} (got {data!r})")
    out = []
    for i, t in enumerate(data):
        where = f"{path}[{i}]"
        if isinstance(t, ScrapeTarget):
            out.append(t)
            continue
        if not isinstance(t, Mapping):
            raise SpecError(where, f"must be a mapping with a url (got {t!r})")
        unknown = sorted(set(t) - {"url", "interval_s", "timeout_s", "host", "job"})
        if unknown:
            raise SpecError(f"{where}.{unknown[0]}", "unknown field; expected url, interval_s, timeout_s, host, job")
        url = t.get("url")
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise SpecError(f"{where}.url", f"must be an http(s) URL (got {url!r})")
        interval = t.get("interval_s", DEFAULT_INTERVAL_S)
        timeout = t.get("timeout_s", DEFAULT_TIMEOUT_S)
        for name, v, low in (("interval_s", interval, 0.1), ("timeout_s", timeout, 0.01)):
            if isinstance(v, bool) or not isinstance(v, int | float) or v < low:
                raise SpecError(f"{where}.{name}", f"must be a number >= {low} (got {v!r})")
        out.append(ScrapeTarget(url, float(interval), float(timeout), str(t.get("host") or parts.hostname),
                                str(t.get("job") or parts.netloc)))
    if out:
        _parser(path)
    return tuple(out)


def exposition_to_request(text: str, target: ScrapeTarget, now_ns: int,
                          starts: dict[tuple[str, tuple[tuple[str, str], ...]], int],
                          known: Callable[[str], bool] = lambda name: False) -> Any:
    """The OTLP request for one scraped page (``starts``: first-seen time of each counter series).

    The parser names a counter's samples ``<family>_total`` whether the page wrote the suffix
    or not (``DCGM_..._COUNT_TOTAL`` comes back as ``..._COUNT_TOTAL_total``); where only the
    family name is one the twin reads (``known``), that is the name sent.
    """
    metrics = []
    for family in _parser()(text):
        kind = _READ.get(family.type)
        if kind is None:
            continue
        by_name: dict[str, list[tuple[Mapping[str, str], int, int, float]]] = {}
        for s in family.samples:
            if kind == "sum" and s.name.endswith("_created"):
                continue  # a counter's creation time, not a value
            name = s.name
            if kind == "sum" and not known(name) and known(family.name):
                name = family.name
            labels = tuple(sorted(s.labels.items()))
            start = starts.setdefault((name, labels), now_ns) if kind == "sum" else 0
            t = int(s.timestamp * 1e9) if s.timestamp else now_ns
            by_name.setdefault(name, []).append((dict(labels), start, t, float(s.value)))
        metrics.extend((name, kind, points) for name, points in by_name.items())
    return request({"host.name": target.host, "service.name": target.job}, metrics)


class Scraper:
    """Scrapes its targets on their intervals in one daemon thread, until :meth:`close`."""

    def __init__(self, ingest: Callable[[Any], tuple[int, str]], targets: Sequence[ScrapeTarget],
                 max_bytes: int, known: Callable[[str], bool] = lambda name: False) -> None:
        self.ingest = ingest
        self.known = known
        self.targets = tuple(targets)
        self.max_bytes = max_bytes
        self.stats = {"scrapes": 0, "scrape_errors": 0}
        self._starts: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], int]] = {}
        self._failing: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="twin-telemetry-scrape", daemon=True)
        if self.targets:
            self._thread.start()

    def scrape(self, target: ScrapeTarget) -> tuple[int, str]:
        """Fetch, parse and ingest one target now: (rejected points, message)."""
        req = urllib.request.Request(target.url, headers={"Accept": "text/plain;version=0.0.4"})
        with urllib.request.urlopen(req, timeout=target.timeout_s) as resp:
            body = resp.read(self.max_bytes + 1)
        if len(body) > self.max_bytes:
            raise ValueError(f"page larger than {self.max_bytes} bytes (telemetry.max_receive_bytes)")
        starts = self._starts.setdefault(target.url, {})
        return self.ingest(exposition_to_request(body.decode("utf-8", "replace"), target, time.time_ns(), starts,
                                                 self.known))

    def _loop(self) -> None:
        due = {t.url: 0.0 for t in self.targets}
        while not self._stop.is_set():
            now = time.monotonic()
            for t in self.targets:
                if due[t.url] > now:
                    continue
                due[t.url] = now + t.interval_s
                try:
                    self.scrape(t)
                    self.stats["scrapes"] += 1
                    if t.url in self._failing:
                        self._failing.discard(t.url)
                        log.info("scrape target %s is back", t.url)
                except Exception as err:  # one bad target never stops the others
                    self.stats["scrape_errors"] += 1
                    if t.url not in self._failing:
                        self._failing.add(t.url)
                        log.warning("scrape of %s failed: %s (retried every %.0f s)", t.url, err, t.interval_s)
            self._stop.wait(max(0.05, min(due.values()) - time.monotonic()))

    def close(self) -> None:
        """Stop the thread this scraper started."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
