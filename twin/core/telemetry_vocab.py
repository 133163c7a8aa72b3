"""The telemetry vocabulary: how an exporter's metric becomes a signal of a twin component.

Plain data only (no OpenTelemetry, no gRPC): fabric plugins return :class:`MetricMapping`
objects from the ``twin_metric_mappings`` hook, and the telemetry adapter
(``twin.telemetry``) matches incoming metric names against them.

A mapping says: these exporter spellings (matched case-insensitively; ``.`` and ``_`` are
the same and a trailing ``_total`` is optional, since Prometheus-to-OTLP pipelines add or
drop it) are signal ``signal`` of a component of kind ``component``, named by the
attributes in ``identity``. Counters are cumulative and become per-second rates; gauges
keep their last value. ``conditions`` turn values into up/down/degraded with evidence;
``capacity`` says how the signal limits the component's usable bandwidth.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Literal

from twin.core.units import human, plain, signal_unit

ComponentState = Literal["up", "degraded", "down"]
Severity = Literal["down", "degraded", "info"]
# Tiers a component belongs to: the scenario factor its capacity scales (see
# twin.core.calibration.live_calibration); "" for components the model does not price.
TIERS = ("compute", "scale_up", "scale_out", "memory", "job", "")
COMPONENT_KINDS = ("gpu", "nvlink", "ib_port", "roce_port", "transceiver", "cxl_device", "switch", "job")
STEP_TIME_SIGNAL = "step_time_s"


@dataclass(frozen=True, slots=True)
class Condition:
    """One health rule on a signal's value (a counter's value is its per-second rate).

    ``op``: ``>``/``<`` compare with ``value``; ``in``/``not_in`` test membership in the
    tuple ``value`` (state codes, XID codes); ``mask`` is true when ``int(v) & value``.
    ``why`` is shown as the evidence's reason and should name the rule's source.
    """

    severity: Severity
    op: Literal[">", "<", "in", "not_in", "mask"]
    value: float | tuple[float, ...]
    why: str

    def holds(self, v: float) -> bool:
        """Whether the rule fires for value ``v``."""
        if self.op == ">":
            return v > float(self.value)  # type: ignore[arg-type]
        if self.op == "<":
            return v < float(self.value)  # type: ignore[arg-type]
        if self.op == "in":
            return v in self.value  # type: ignore[operator]
        if self.op == "not_in":
            return v not in self.value  # type: ignore[operator]
        return bool(int(v) & int(self.value))  # type: ignore[arg-type]

    def describe(self) -> str:
        """The rule as text, e.g. ``> 100``."""
        if isinstance(self.value, tuple):
            return f"{self.op} {{{', '.join(plain(x, 6) for x in self.value)}}}"
        return f"{self.op} {plain(self.value)}" if self.op != "mask" else f"& {int(self.value):#x}"


@dataclass(frozen=True, slots=True)
class MetricMapping:
    """One exporter metric (in all its spellings) -> one signal of one kind of component.

    ``names`` may contain ``{n}`` (digits, e.g. a priority or lane in the name) and a
    leading ``{*}`` (any prefix, e.g. ``node_ethtool_``). ``identity``: attribute keys that
    name the component besides its host; ``a|b`` accepts either key. ``detail``:
    attributes that split one component's signal into series (lane, priority), combined
    with ``aggregate``. ``scale`` converts to the signal's SI unit. ``capacity``:
    ``ratio_to_peak`` (usable fraction = value / the highest value this component has
    shown, e.g. a link that trained down from 4x to 2x width) or ``one_minus`` (fraction
    = 1 - value, e.g. the share of time a port is paused).
    """

    names: tuple[str, ...]
    component: str
    signal: str
    kind: Literal["counter", "gauge"] = "gauge"
    identity: tuple[str, ...] = ()
    detail: tuple[str, ...] = ()
    aggregate: Literal["sum", "min", "max"] = "sum"
    scale: float = 1.0
    tier: str = ""
    unit: str = ""
    conditions: tuple[Condition, ...] = ()
    capacity: Literal["", "ratio_to_peak", "one_minus"] = ""
    source: str = ""
    plugin: str = field(default="", compare=False)

    def validate(self) -> str | None:
        """A reason this mapping is unusable, or None."""
        if not self.names or not all(isinstance(n, str) and n for n in self.names):
            return "names must be non-empty strings"
        if not self.component or not self.signal:
            return "component and signal are required"
        if self.kind not in ("counter", "gauge"):
            return f"kind must be counter or gauge (got {self.kind!r})"
        if self.tier not in TIERS:
            return f"tier must be one of {TIERS} (got {self.tier!r})"
        if not (math.isfinite(self.scale) and self.scale > 0):
            return f"scale must be a positive number (got {self.scale!r})"
        return None


def normalize_name(name: str) -> str:
    """The spelling-independent form of a metric name.

    Lower case (the OpenTelemetry Python SDK lower-cases instrument names), ``.`` as
    ``_`` (OTel-style vs Prometheus-style names) and no trailing ``_total`` (Prometheus
    counters carry it; OTLP translation may drop it).
    """
    n = name.strip().lower().replace(".", "_").replace("-", "_")
    return n.removesuffix("_total")


def name_pattern(name: str) -> re.Pattern[str] | None:
    """A regex for a mapping name with placeholders (None: a plain name).

    ``{n}`` matches digits; ``{word}`` matches digits captured as attribute ``word`` (the
    link of ``..._L{link}``, the priority of ``rx_prio{prio}_pause``); a leading ``{*}``
    matches an exporter's prefix (empty or ending in ``_``).
    """
    norm = normalize_name(name)
    if "{" not in norm:
        return None
    rx = []
    for part in re.split(r"(\{[a-z*]+\})", norm):
        if part == "{*}":
            rx.append(r"(?:[a-z0-9_]*_)?")
        elif part == "{n}":
            rx.append(r"\d+")
        elif part.startswith("{") and part.endswith("}"):
            rx.append(rf"(?P<{part[1:-1]}>\d+)")
        else:
            rx.append(re.escape(part))
    return re.compile("".join(rx) + r"\Z")


@dataclass(frozen=True, slots=True)
class Evidence:
    """Why a component is in its state: a signal, its value and the rule that fired."""

    signal: str
    value: float
    rule: str
    severity: Severity
    why: str
    metric: str = ""

    def text(self) -> str:
        """One readable line."""
        return f"{self.signal}={human(self.value, signal_unit(self.signal))} {self.rule}: {self.why}"
