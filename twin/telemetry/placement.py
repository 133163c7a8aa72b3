"""Which hosts a registered job runs on: its placement, and the ranks of its nodes.

A job is registered with an explicit host list, or with a selector on the attributes its
telemetry already carries: OpenTelemetry resource attributes such as ``k8s.job.name``,
``slurm.job.id`` or ``host.name`` (``fnmatch`` globs: ``gpu-a-*``). Every term of a selector
must match. A part (GPU, NIC port, transceiver, NVLink) counts for a job only when its host
is in the job's placement: a part outside it never changes that job's answer. Parts no
registered job owns are listed as unplaced (shown, never guessed into a job).

Node ranks: the explicit list's order; under a selector, the integer value of
``rank_attribute`` where every matched host carries one (e.g. ``slurm.node.rank``), else the
natural order of the host names (``node-2`` before ``node-10``), which is stated in the answer.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from twin.core.errors import SpecError

# Attributes of a telemetry resource (or data point) kept on each component so a selector
# can match them: the OpenTelemetry semantic conventions for hosts and Kubernetes
# (semconv "host", "k8s" resource attributes), Slurm's job variables as OpenTelemetry
# attributes (slurm.job.id = SLURM_JOB_ID, slurm.node.rank = SLURM_NODEID), and the twin's
# own ``twin.job`` / ``twin.node.rank`` for schedulers without either.
PLACEMENT_KEYS = ("host.name", "k8s.job.name", "k8s.namespace.name", "k8s.pod.name", "k8s.node.name",
                  "k8s.jobset.name", "slurm.job.id", "slurm.job.name", "slurm.node.rank", "twin.job",
                  "twin.node.rank")
# Bounds: hosts per placement (10 million GPUs / 8 per node, the twin's largest cluster),
# selector terms, pattern length.
MAX_HOSTS = 1_250_000
MAX_TERMS = len(PLACEMENT_KEYS)
MAX_PATTERN = 256
_DIGITS = re.compile(r"(\d+)")


def natural_key(text: str) -> tuple[Any, ...]:
    """Sort key putting ``node-2`` before ``node-10``."""
    return tuple(int(p) if p.isdigit() else p for p in _DIGITS.split(text))


@dataclass(frozen=True, slots=True)
class Placement:
    """A job's hosts (in rank order) or a selector over telemetry attributes (see module doc)."""

    hosts: tuple[str, ...] = ()
    selector: tuple[tuple[str, str], ...] = ()
    rank_attribute: str = ""
    host_set: frozenset[str] = field(default=frozenset(), compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "host_set", frozenset(self.hosts))

    def to_dict(self) -> dict[str, Any]:
        """Plain data (stored with the job, shown in answers)."""
        return {"hosts": list(self.hosts), "selector": dict(self.selector), "rank_attribute": self.rank_attribute}

    def describe(self) -> str:
        """One line for notes."""
        if self.hosts:
            return f"{len(self.hosts)} listed host(s)"
        return "selector " + ", ".join(f"{k}={v}" for k, v in self.selector)

    def matches(self, host: str, attrs: Mapping[str, str]) -> bool:
        """Whether a part on ``host`` with telemetry attributes ``attrs`` belongs to this job."""
        if self.hosts:
            return host in self.host_set
        for key, pattern in self.selector:
            value = host if key == "host.name" else attrs.get(key)
            if value is None or not fnmatch.fnmatchcase(value, pattern):
                return False
        return bool(self.selector)

    def ranked(self, hosts: Mapping[str, Mapping[str, str]]) -> tuple[list[str], str]:
        """The job's hosts among ``hosts`` (host -> attributes), in rank order, and how ranked."""
        if self.hosts:
            return [h for h in self.hosts if h in hosts], "the order of placement.hosts"
        mine = [h for h, attrs in hosts.items() if self.matches(h, attrs)]
        key = self.rank_attribute
        if key:
            ranks = {h: hosts[h].get(key, "") for h in mine}
            if mine and all(v.strip().isdigit() for v in ranks.values()):
                return sorted(mine, key=lambda h: (int(ranks[h]), natural_key(h))), f"attribute {key}"
        return sorted(mine, key=natural_key), "the natural order of the host names"


def parse_placement(data: Any, field: str = "placement") -> Placement | None:
    """A :class:`Placement` from plain data (``hosts``, ``selector``, ``rank_attribute``); None for
    none given. Errors name the field and the rule.
    """
    if data is None or data == {}:
        return None
    if not isinstance(data, Mapping):
        raise SpecError(field, "must be a mapping with hosts or selector")
    unknown = sorted(set(data) - {"hosts", "selector", "rank_attribute"})
    if unknown:
        raise SpecError(f"{field}.{unknown[0]}", "unknown field (known: hosts, selector, rank_attribute)")
    hosts = _hosts(data.get("hosts") or [], f"{field}.hosts")
    selector = _selector(data.get("selector") or {}, f"{field}.selector")
    rank = data.get("rank_attribute") or ""
    if hosts and selector:
        raise SpecError(field, "give hosts or selector, not both")
    if not hosts and not selector:
        return None if not rank else _raise(f"{field}.rank_attribute", "needs a selector")
    if not isinstance(rank, str) or (rank and rank not in PLACEMENT_KEYS):
        raise SpecError(f"{field}.rank_attribute", f"must be one of {', '.join(PLACEMENT_KEYS)} (got {rank!r})")
    if rank and hosts:
        raise SpecError(f"{field}.rank_attribute", "ranks of listed hosts are their order in hosts")
    return Placement(hosts=hosts, selector=selector, rank_attribute=rank)


def _raise(field: str, rule: str) -> None:
    raise SpecError(field, rule)


def _hosts(values: Any, field: str) -> tuple[str, ...]:
    if not isinstance(values, list | tuple):
        raise SpecError(field, "must be a list of host names")
    if len(values) > MAX_HOSTS:
        raise SpecError(field, f"at most {MAX_HOSTS:,} hosts (got {len(values):,})")
    seen: set[str] = set()
    for i, h in enumerate(values):
        if not isinstance(h, str) or not h.strip() or len(h) > MAX_PATTERN or not h.isprintable():
            raise SpecError(f"{field}[{i}]", f"must be a host name of 1-{MAX_PATTERN} printable characters")
        if h in seen:
            raise SpecError(f"{field}[{i}]", f"host {h!r} is listed twice")
        seen.add(h)
    return tuple(values)


def _selector(values: Any, field: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(values, Mapping):
        raise SpecError(field, "must be a mapping of attribute -> glob pattern")
    if len(values) > MAX_TERMS:
        raise SpecError(field, f"at most {MAX_TERMS} terms")
    out = []
    for key, pattern in values.items():
        where = f"{field}[{key!r}]"
        if key not in PLACEMENT_KEYS:
            raise SpecError(where, f"the twin keeps only these attributes of telemetry: {', '.join(PLACEMENT_KEYS)}")
        if not isinstance(pattern, str) or not pattern.strip() or len(pattern) > MAX_PATTERN \
                or not pattern.isprintable():
            raise SpecError(where, f"must be a glob pattern of 1-{MAX_PATTERN} printable characters")
        if pattern.count("[") != pattern.count("]"):
            raise SpecError(where, f"unbalanced [ ] in pattern {pattern!r}")
        if pattern.strip("*?") == "":
            raise SpecError(where, "matches every value: name the job's hosts (a job never owns the whole fleet)")
        out.append((str(key), pattern))
    return tuple(sorted(out))


def attributes_of(attrs: Mapping[str, str], res: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The placement attributes of a data point (its own win over its resource's), sorted."""
    out = []
    for key in PLACEMENT_KEYS:
        value = attrs.get(key, res.get(key))
        if value is not None and key != "host.name":
            out.append((key, str(value)[:MAX_PATTERN]))
    return tuple(out)


def unplaced(hosts: Iterable[str], placements: Iterable[Placement],
             attributes: Mapping[str, Mapping[str, str]]) -> list[str]:
    """Hosts no placement owns, in natural order."""
    ps = list(placements)
    return sorted((h for h in hosts if not any(p.matches(h, attributes.get(h, {})) for p in ps)), key=natural_key)
