"""Durable telemetry state: SQLite in the state directory, one transaction per ingest batch.

WAL journal mode, so readers never block the writer and a commit is one append to the
log; ``synchronous=NORMAL`` (the default here) makes every committed transaction survive
a crash of the process (kill -9), and ``FULL`` also survives power loss (SQLite docs,
"Write-Ahead Logging" and "PRAGMA synchronous"). The ingest worker acknowledges an
OTLP request only after its batch is committed, so a crash loses at most the requests
not yet acknowledged, which their exporters retry.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import sqlite3
import struct
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from twin.core.calibration import Adjustment
from twin.core.counter_rates import SeriesPoint
from twin.core.errors import SpecError, TwinError
from twin.core.specs import Calibration
from twin.telemetry.state import (
    OBSERVATIONS_PER_JOB,
    Component,
    series_key_parse,
    stored_float,
    stored_ns,
)

log = logging.getLogger(__name__)
# One encoder, made once: json.dumps with any option builds a new encoder at every call.
_encode = json.JSONEncoder(separators=(",", ":")).encode
# A component's signal names as stored (JSON), by name tuple: components of one kind share a few
# sets, so each is encoded once. Bounded (cleared when full) at 4,096 sets, far more than the
# combinations the built-in mappings make (a handful per component kind), so it only clears
# under a flood of made-up names.
_NAMES: dict[tuple[str, ...], str] = {}
_NAMES_LIMIT = 4096
_PACKS: dict[int, struct.Struct] = {}
#: Fault injection, off by default: with ``TWIN_TELEMETRY_FAIL_EVERY_NTH_COMMIT=N`` every Nth
#: ingest commit fails as a full disk fails a write (``OSError`` ENOSPC), after its rows are
#: written and before COMMIT, so it is rolled back like a real failed write. For tests that
#: prove a failed write is never acknowledged and kill -9 loses nothing acknowledged
#: (tests/telemetry/test_durability.py); never set it in production.
FAULT_ENV = "TWIN_TELEMETRY_FAIL_EVERY_NTH_COMMIT"


def pack_signals(signals: dict[str, float]) -> tuple[str, bytes]:
    """A component's signals as stored in ``component_live``: names (JSON) and values
    (little-endian doubles, in name order). Packing eight doubles costs a fifth of writing
    them as JSON text, and every batch writes every component it touched.
    """
    names = tuple(signals)
    text = _NAMES.get(names)
    if text is None:
        if len(_NAMES) >= _NAMES_LIMIT:
            _NAMES.clear()
        text = _NAMES[names] = _encode(names)
    pack = _PACKS.get(len(names))
    if pack is None:
        pack = _PACKS[len(names)] = struct.Struct(f"<{len(names)}d")
    return text, pack.pack(*signals.values())


def unpack_signals(names: str, vals: bytes) -> dict[str, float]:
    """Inverse of :func:`pack_signals`."""
    keys = json.loads(names)
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise ValueError("signal names must be a list of text")
    return dict(zip(keys, struct.unpack(f"<{len(keys)}d", vals), strict=True))

SCHEMA_VERSION = 1
SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS series (key TEXT PRIMARY KEY, start_ns INTEGER, time_ns INTEGER, value REAL,
                                   derived REAL);
CREATE TABLE IF NOT EXISTS components (id TEXT PRIMARY KEY, data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS component_live (id TEXT PRIMARY KEY, last_seen_ns INTEGER NOT NULL, names TEXT NOT NULL,
                                           vals BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS observations (job TEXT, time_ns INTEGER, value REAL, PRIMARY KEY (job, time_ns));
CREATE TABLE IF NOT EXISTS events (seq INTEGER PRIMARY KEY AUTOINCREMENT, time_ns INTEGER, component TEXT,
                                   old TEXT, new TEXT, why TEXT);
CREATE TABLE IF NOT EXISTS jobs (job TEXT PRIMARY KEY, scenario TEXT NOT NULL, updated_ns INTEGER);
CREATE TABLE IF NOT EXISTS calibration (id INTEGER PRIMARY KEY CHECK (id = 1), data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS calibration_history (seq INTEGER PRIMARY KEY AUTOINCREMENT, time_ns INTEGER,
                                                factor TEXT, old REAL, new REAL, reason TEXT);
CREATE TABLE IF NOT EXISTS step_history (job TEXT, time_ns INTEGER, designed_s REAL, now_s REAL, observed_s REAL,
                                         PRIMARY KEY (job, time_ns));
"""
# Step-time samples kept per job (predicted as designed and now, observed): the oldest go first.
# 10,000: at the default sampling period (telemetry.history_interval_s, 15 s) 41 hours of a job whose
# numbers move at every sample, longer when they hold still (a sample is stored only when one moved);
# ~40 bytes a row, 0.4 MB a job.
HISTORY_PER_JOB = 10_000


class Store:
    """The telemetry database. Methods are thread-safe (one connection, one lock)."""

    def __init__(self, path: Path, synchronous: str = "NORMAL") -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        #: Where a corrupted database was moved aside at start-up (None: it opened cleanly).
        self.moved_aside: Path | None = None
        #: Rows the load_* methods could not use: (table, key, why).
        self.skipped: list[tuple[str, str, str]] = []
        where = self.path.parent
        try:
            where.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise SpecError("state_dir", f"cannot use {where}: {err.strerror or err} (pass --state-dir with a "
                                         "writable directory)") from err
        if not os.access(where, os.W_OK):
            raise SpecError("state_dir", f"{where} is not writable (pass --state-dir with a writable directory)")
        self._fail_every = _fault_setting()
        self._commits = 0
        try:
            self._db = self._open(synchronous)
        except sqlite3.DatabaseError as err:
            # Corrupted or truncated: keep it for inspection, report it, start a new one (never a
            # silent reset: the log and `moved_aside` say where the old one went).
            self.moved_aside = self._move_aside()
            log.error("telemetry state database unreadable; moved aside", extra={
                "path": str(self.path), "moved_to": str(self.moved_aside), "error": str(err)})
            try:
                self._db = self._open(synchronous)
            except sqlite3.Error as again:
                raise SpecError("state_dir", f"cannot create {self.path}: {again}") from again

    def _open(self, synchronous: str) -> sqlite3.Connection:
        db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(f"PRAGMA synchronous={'FULL' if synchronous.upper() == 'FULL' else 'NORMAL'}")
            check = db.execute("PRAGMA quick_check").fetchone()
            if check is None or check[0] != "ok":
                raise sqlite3.DatabaseError(f"integrity check failed: {check[0] if check else 'no answer'}")
            db.executescript(SCHEMA)
            db.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
        except BaseException:
            db.close()
            raise
        return db

    def _move_aside(self) -> Path:
        stamp = time.strftime("%Y%m%dT%H%M%S")
        target = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        for suffix in ("", "-wal", "-shm"):
            src = Path(str(self.path) + suffix)
            if src.exists():
                src.replace(Path(str(target) + suffix))
        return target

    def close(self) -> None:
        """Close the connection (the WAL is checkpointed by SQLite)."""
        with self._lock:
            self._db.close()

    # ---------------------------------------------------------------- writes
    def commit_batch(self, series: Iterable[tuple[str, SeriesPoint]], records: Iterable[Component],
                     live: Iterable[Component], observations: Iterable[tuple[str, int, float]],
                     events: Iterable[tuple[int, str, str, str, str]]) -> None:
        """Everything one ingest batch changed, atomically.

        ``records``: components whose whole record is written (new or reassessed);
        ``live``: components whose signals and last-seen time are written (every one a
        batch touched: a few hundred bytes instead of the whole record, which is most of
        the write volume of a batch). Each of ``records`` is written in both tables.
        """
        srows = [(text, p.start_ns, p.time_ns, p.value, p.derived) for text, p in series]
        written = {c.id: c for c in live}
        crows = []
        for c in records:
            crows.append((c.id, _encode(c.to_record())))
            written[c.id] = c
        lrows = [(c.id, c.last_seen_ns, *pack_signals(c.signals)) for c in written.values()]
        orows = list(observations)
        with self._lock:
            db = self._db
            db.execute("BEGIN")
            try:
                # Upserts, not INSERT OR REPLACE: the row is updated in place instead of deleted
                # and re-inserted with its primary-key index entry (SQLite docs, "UPSERT").
                db.executemany("INSERT INTO series VALUES (?,?,?,?,?) ON CONFLICT(key) DO UPDATE SET "
                               "start_ns = excluded.start_ns, time_ns = excluded.time_ns, value = excluded.value, "
                               "derived = excluded.derived", srows)
                db.executemany("INSERT INTO components VALUES (?,?) ON CONFLICT(id) DO UPDATE SET "
                               "data = excluded.data", crows)
                db.executemany("INSERT INTO component_live VALUES (?,?,?,?) ON CONFLICT(id) DO UPDATE SET "
                               "last_seen_ns = excluded.last_seen_ns, names = excluded.names, vals = excluded.vals",
                               lrows)
                if orows:
                    db.executemany("INSERT OR REPLACE INTO observations VALUES (?,?,?)", orows)
                    for job in {o[0] for o in orows}:
                        db.execute("DELETE FROM observations WHERE job = ? AND time_ns < (SELECT time_ns FROM "
                                   "observations WHERE job = ? ORDER BY time_ns DESC LIMIT 1 OFFSET ?)",
                                   (job, job, OBSERVATIONS_PER_JOB - 1))
                db.executemany("INSERT INTO events (time_ns, component, old, new, why) VALUES (?,?,?,?,?)",
                               list(events))
                self._commits += 1
                if self._fail_every and self._commits % self._fail_every == 0:
                    raise OSError(errno.ENOSPC, f"No space left on device (injected by {FAULT_ENV})")
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def save_job(self, job: str, scenario: dict[str, Any], now_ns: int) -> None:
        """Register (or replace) the scenario a job runs."""
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO jobs VALUES (?,?,?)", (job, json.dumps(scenario), now_ns))

    def save_calibration(self, calibration: Calibration, adjustments: Iterable[Adjustment], now_ns: int) -> None:
        """The new calibration and the adjustments that made it, atomically."""
        data = json.dumps({"compute_efficiency": calibration.compute_efficiency,
                           "scale_up_bandwidth": calibration.scale_up_bandwidth,
                           "scale_out_bandwidth": calibration.scale_out_bandwidth, "source": calibration.source})
        with self._lock:
            db = self._db
            db.execute("BEGIN")
            try:
                db.execute("INSERT OR REPLACE INTO calibration VALUES (1, ?)", (data,))
                db.executemany("INSERT INTO calibration_history (time_ns, factor, old, new, reason) VALUES "
                               "(?,?,?,?,?)", [(now_ns, a.factor, a.old, a.new, a.reason) for a in adjustments])
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def save_history(self, rows: Iterable[tuple[str, int, float, float, float | None]]) -> None:
        """Step-time samples ``(job, time_ns, designed_s, now_s, observed_s or None)``, keeping the latest
        ``HISTORY_PER_JOB`` of each job.
        """
        rows = list(rows)
        if not rows:
            return
        with self._lock:
            db = self._db
            db.execute("BEGIN")
            try:
                db.executemany("INSERT OR REPLACE INTO step_history VALUES (?,?,?,?,?)", rows)
                for job in {r[0] for r in rows}:
                    db.execute("DELETE FROM step_history WHERE job = ? AND time_ns < (SELECT time_ns FROM "
                               "step_history WHERE job = ? ORDER BY time_ns DESC LIMIT 1 OFFSET ?)",
                               (job, job, HISTORY_PER_JOB - 1))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def save_skipped(self, skipped: dict[str, str]) -> None:
        """Why each job was last kept out of the calibration fit (job -> reason)."""
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO meta VALUES ('calibration_skipped', ?)", (json.dumps(skipped),))

    def load_skipped(self) -> dict[str, str]:
        """What :meth:`save_skipped` last wrote ({} when nothing, or a row this version cannot read)."""
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key = 'calibration_skipped'").fetchone()
        try:
            data = json.loads(row[0]) if row else {}
            if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
                raise TypeError("not a mapping of job -> reason")
            return {str(k): v for k, v in data.items()}
        except (ValueError, TypeError) as err:
            self._skip("meta", "calibration_skipped", err)
            return {}

    # ---------------------------------------------------------------- reads
    # Reading back: a row this version cannot use (written by another version, edited by
    # hand, a value out of range) is skipped and reported in ``skipped`` (table, key, why),
    # never a crash at start-up and never an answer the API cannot encode.
    def _skip(self, table: str, key: Any, err: BaseException | str) -> None:
        why = err if isinstance(err, str) else f"{type(err).__name__}: {err}"
        self.skipped.append((table, str(key)[:200], why[:300]))

    def _json_mapping(self, table: str, key: Any, text: Any, what: str) -> dict[str, Any] | None:
        """The JSON mapping stored under text key ``key``, or None (skipped, with why)."""
        try:
            value = json.loads(text)
        except (ValueError, TypeError) as err:
            self._skip(table, key, err)
            return None
        if not isinstance(value, dict) or not isinstance(key, str):
            self._skip(table, key, what)
            return None
        return value

    def load_series(self) -> list[tuple[str, SeriesPoint]]:
        """Every series' last point, by series text (:func:`twin.telemetry.state.series_key_text`)."""
        with self._lock:
            rows = self._db.execute("SELECT key, start_ns, time_ns, value, derived FROM series").fetchall()
        out = []
        for k, s, t, v, d in rows:
            try:
                series_key_parse(k)  # a key this version can read
                out.append((k, SeriesPoint(stored_ns(s), stored_ns(t), stored_float(v),
                                           None if d is None else stored_float(d))))
            except (ValueError, TypeError, AttributeError) as err:
                self._skip("series", k, err)
        return out

    def load_components(self) -> list[tuple[str, dict[str, Any]]]:
        """Every component's persisted record (a mapping; its fields are checked by the state), with
        its latest signals and last-seen time from ``component_live``.
        """
        with self._lock:
            rows = self._db.execute("SELECT c.id, c.data, l.last_seen_ns, l.names, l.vals FROM components c "
                                    "LEFT JOIN component_live l ON l.id = c.id").fetchall()
        out = []
        for cid, data, last_seen, names, vals in rows:
            rec = self._json_mapping("components", cid, data, "not a component record")
            if rec is None:
                continue
            if names is not None:  # absent in a database written before component_live existed
                try:
                    signals, seen = unpack_signals(names, vals), stored_ns(last_seen)
                    rec["signals"], rec["last_seen_ns"] = signals, seen
                except (ValueError, TypeError, struct.error) as err:  # the record's own, older values stand
                    self._skip("component_live", cid, err)
            out.append((cid, rec))
        return out

    def load_observations(self) -> list[tuple[str, int, float]]:
        """Step-time observations, oldest first per job."""
        with self._lock:
            rows = self._db.execute("SELECT job, time_ns, value FROM observations ORDER BY job, time_ns").fetchall()
        out = []
        for j, t, v in rows:
            try:
                value = stored_float(v)
                if not isinstance(j, str) or value <= 0:
                    raise ValueError("a step time must be a positive number of a named job")
                out.append((j, stored_ns(t), value))
            except (ValueError, TypeError) as err:
                self._skip("observations", (j, t), err)
        return out

    def load_events(self, limit: int = 1000) -> list[tuple[int, str, str, str, str]]:
        """The latest state-change events, oldest first."""
        with self._lock:
            rows = self._db.execute("SELECT time_ns, component, old, new, why FROM events ORDER BY seq DESC "
                                    "LIMIT ?", (limit,)).fetchall()
        out = []
        for t, c, o, n, w in reversed(rows):
            try:
                if not all(isinstance(x, str) for x in (c, o, n, w)):
                    raise TypeError("component, old, new and why must be text")
                out.append((stored_ns(t), c, o, n, w))
            except (ValueError, TypeError) as err:
                self._skip("events", (t, c), err)
        return out

    def load_jobs(self) -> dict[str, dict[str, Any]]:
        """Registered jobs and their scenario mappings."""
        with self._lock:
            rows = self._db.execute("SELECT job, scenario FROM jobs").fetchall()
        out = {}
        for j, text in rows:
            mapping = self._json_mapping("jobs", j, text, "not a scenario mapping")
            if mapping is not None:
                out[j] = mapping
        return out

    def load_history(self, job: str | None = None, limit: int = HISTORY_PER_JOB) -> dict[str, list[dict[str, Any]]]:
        """The latest ``limit`` step-time samples of ``job`` (None: of every job), oldest first, by job:
        ``{time_ns, designed_s, now_s, observed_s}`` (``observed_s`` None before the job reported a step).
        """
        query = ("SELECT job, time_ns, designed_s, now_s, observed_s FROM (SELECT *, ROW_NUMBER() OVER "
                 "(PARTITION BY job ORDER BY time_ns DESC) AS n FROM step_history" + (" WHERE job = ?" if job else "")
                 + ") WHERE n <= ? ORDER BY job, time_ns")
        with self._lock:
            rows = self._db.execute(query, (job, limit) if job else (limit,)).fetchall()
        out: dict[str, list[dict[str, Any]]] = {}
        for j, t, d, n, o in rows:
            try:
                if not isinstance(j, str):
                    raise TypeError("job must be text")
                out.setdefault(j, []).append({"time_ns": stored_ns(t), "designed_s": stored_float(d),
                                              "now_s": stored_float(n),
                                              "observed_s": None if o is None else stored_float(o)})
            except (ValueError, TypeError) as err:
                self._skip("step_history", (j, t), err)
        return out

    def load_calibration(self) -> tuple[Calibration | None, list[dict[str, Any]]]:
        """The current calibration (None: never fitted) and its history, oldest first."""
        with self._lock:
            row = self._db.execute("SELECT data FROM calibration WHERE id = 1").fetchone()
            hist = self._db.execute("SELECT seq, time_ns, factor, old, new, reason FROM calibration_history "
                                    "ORDER BY seq").fetchall()
        cal = None
        if row is not None:
            try:
                cal = Calibration(**json.loads(row[0]))
            except (ValueError, TypeError, TwinError) as err:
                self._skip("calibration", 1, err)
        history = []
        for s, t, f, o, n, r in hist:
            try:
                history.append({"seq": int(s), "time_ns": stored_ns(t), "factor": str(f), "old": stored_float(o),
                                "new": stored_float(n), "reason": str(r)})
            except (ValueError, TypeError) as err:
                self._skip("calibration_history", s, err)
        return cal, history


def _fault_setting() -> int:
    """``FAULT_ENV`` as an integer (0: off)."""
    text = os.environ.get(FAULT_ENV, "").strip()
    if not text:
        return 0
    if not text.isdigit() or int(text) < 1:
        raise SpecError(FAULT_ENV, f"must be a whole number >= 1 (got {text[:40]!r}); unset it to turn faults off")
    return int(text)
