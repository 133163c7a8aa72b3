"""The cluster as a picture: its fabric aggregated by tier and group, with live state placed on it.

The structure comes from the estimate's fabric report (``Estimate.to_dict()["fabric"]``: the
tiers the fabric plugins built, with the GPUs each spans, switches per tier, the NVLink
domains, optics and memory pool). A *group at tier t* is the set of GPUs one tier-t switch
layer connects without going higher (``span_gpus`` of that tier), so at any size a view shows
the children of one group: the groups of the tier below, or at the leaf the nodes themselves,
and the switches of the group's own tier as one aggregated box. When a view would show more
than :data:`MAX_BOXES` items, consecutive items are banded (one box per band), so a page never
draws more than that many boxes whatever the cluster's size.

Live components (``TelemetryService.live_state()``) are placed by host: the hosts telemetry
has seen are put on the nodes in the natural order of their names (``node-2`` before
``node-10``), first node first; a host beyond the cluster's node count is listed as
unplaced. A port, transceiver or GPU is placed on its node's rail by the number its device or
GPU label ends with (``mlx5_5`` is rail 5). An item's state is the worst state of what it
holds; an edge from an item to the switches above stands for the item's links into the
scale-out fabric and takes the worst state of those links (ports and transceivers). This is a
placement convention (the twin does not know the cluster's cabling), said on the page.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from twin.core.errors import SpecError

# Boxes drawn in one view at most: past this, items are banded. 64 is an 8 x 8 grid, which
# leaves each box about 110 px of the page's 900-px graph, enough for its two-line label (a
# layout choice; benchmarks/bench_web.py measures what a 16,384-GPU view costs the browser).
MAX_BOXES = 64
RANK = {"nodata": -1, "up": 0, "degraded": 1, "down": 2}
LINK_KINDS = ("ib_port", "roce_port", "transceiver")
_NUM = re.compile(r"(\d+)")
_TAIL = re.compile(r"(\d+)(?:/\d+)?$")


def natural_key(text: str) -> tuple[Any, ...]:
    """Sort key that orders the numbers inside names by value (``node-2`` < ``node-10``)."""
    return tuple(int(p) if p.isdigit() else p for p in _NUM.split(text))


def worst(states: Iterable[str]) -> str:
    """The most severe of ``states`` (``nodata`` when there are none)."""
    out = "nodata"
    for s in states:
        if RANK.get(s, 0) > RANK[out]:
            out = s
    return out


def rail_of(component: Mapping[str, Any]) -> int | None:
    """The rail (GPU or NIC index in its node) a live component sits on, from its labels."""
    labels = component.get("labels") or {}
    for key in ("gpu", "device", "port"):
        m = _TAIL.search(str(labels.get(key, "")))
        if m:
            return int(m.group(1))
    return None


@dataclass(frozen=True, slots=True)
class Layout:
    """What the picture is drawn from: sizes and tiers of one scenario's cluster."""

    name: str
    num_gpus: int
    gpus_per_node: int
    nics_per_node: int
    tiers: tuple[Mapping[str, Any], ...]  # scale-out tiers, lowest first: name, span_gpus, switches
    scale_up: Mapping[str, Any]
    scale_out: Mapping[str, Any]
    optics: Mapping[str, Any] | None = None
    memory: Mapping[str, Any] | None = None

    @property
    def nodes(self) -> int:
        """Nodes (hosts) in the cluster."""
        return max(1, -(-self.num_gpus // self.gpus_per_node))

    def span(self, tier: int) -> int:
        """GPUs one group at scale-out tier ``tier`` holds (the whole cluster at most)."""
        return min(self.num_gpus, int(self.tiers[tier]["span_gpus"]))

    def groups(self, tier: int) -> int:
        """Groups at tier ``tier``."""
        return max(1, -(-self.num_gpus // self.span(tier)))

    def switches_in(self, tier: int, gpus: int) -> float:
        """Switches of tier ``tier`` serving ``gpus`` GPUs (the tier's switches pro rata)."""
        total = float(self.tiers[tier].get("switches") or 0)
        return total * gpus / self.num_gpus


def layout_of(name: str, num_gpus: int, gpus_per_node: int, nics_per_node: int, fabric: Mapping[str, Any]) -> Layout:
    """The layout of a cluster from its estimate's fabric report."""
    scale_out = dict(fabric.get("scale_out") or {})
    per_tier = list(scale_out.get("switches_per_tier") or [])
    tiers = []
    for t in fabric.get("tiers") or []:
        if t.get("name") == "nvlink" or int(t.get("span_gpus") or 0) <= 0:
            continue
        i = len(tiers)
        tiers.append({**t, "switches": per_tier[i] if i < len(per_tier) else 0})
    scale_up = dict(fabric.get("scale_up") or {})
    if not tiers:  # one scale-up domain and nothing above it: the domain is the top "tier"
        tiers.append({"name": scale_up.get("kind", "scale-up"), "span_gpus": num_gpus, "switches": 0})
    return Layout(name, num_gpus, gpus_per_node, nics_per_node, tuple(tiers), scale_up, scale_out,
                  fabric.get("optics"), fabric.get("memory"))


@dataclass
class Placement:
    """Live components placed on nodes (index -> components), and what could not be placed."""

    by_node: dict[int, list[Mapping[str, Any]]] = field(default_factory=dict)
    hosts: dict[int, str] = field(default_factory=dict)
    unplaced: list[Mapping[str, Any]] = field(default_factory=list)

    def node_state(self, k: int) -> str:
        """Worst state of node ``k``'s components (``nodata``: none reported)."""
        return worst(c["state"] for c in self.by_node.get(k, ()))

    def link_state(self, k: int, rail: int | None = None) -> str:
        """Worst state of node ``k``'s scale-out links (one rail's, when given)."""
        return worst(c["state"] for c in self.by_node.get(k, ())
                     if c.get("kind") in LINK_KINDS and (rail is None or rail_of(c) == rail))


def place(components: Sequence[Mapping[str, Any]], nodes: int) -> Placement:
    """Put live components on node slots: hosts in natural order of their names (module doc)."""
    out = Placement()
    hosts = sorted({str(c.get("host") or "") for c in components if c.get("host") and c.get("kind") != "job"},
                   key=natural_key)
    index = {h: i for i, h in enumerate(hosts)}
    for c in components:
        if c.get("kind") == "job" or not c.get("host"):
            continue
        k = index[str(c["host"])]
        if k >= nodes:
            out.unplaced.append(c)
            continue
        out.by_node.setdefault(k, []).append(c)
        out.hosts[k] = str(c["host"])
    return out


@dataclass(frozen=True, slots=True)
class Item:
    """One box of a view: a group at a tier, a node, or a band of either."""

    level: str  # "tier:<t>" (groups at tier t) or "node"
    lo: int  # first index (inclusive) at that level
    hi: int  # last index (exclusive)


def parse_at(text: str, layout: Layout) -> Item:
    """The view a query's ``at`` names: ``tier:T:LO:HI``, ``node:LO:HI`` or ``node:K`` (one node's detail)."""
    top = len(layout.tiers) - 1
    if not text:
        return _children_of(layout, top, 0)
    parts = text.split(":")
    try:
        nums = [int(p) for p in parts[1:]]
    except ValueError:
        nums = []
    if parts[0] == "tier" and len(nums) == 3 and 0 <= nums[0] <= top:
        level, lo, hi = f"tier:{nums[0]}", nums[1], nums[2]
        count = layout.groups(nums[0])
    elif parts[0] == "node" and len(nums) in (1, 2):
        level, lo = "node", nums[0]
        hi = nums[1] if len(nums) == 2 else lo + 1
        count = layout.nodes
    else:
        raise SpecError("at", f"must be tier:T:LO:HI, node:LO:HI or node:K (got {text!r})")
    if not 0 <= lo < hi <= count:
        raise SpecError("at", f"range {lo}:{hi} is outside 0:{count} for {level}")
    return Item(level, lo, hi)


def _children_of(layout: Layout, tier: int, group: int) -> Item:
    """The items one group at ``tier`` holds: groups of the tier below, or nodes under a leaf."""
    span = layout.span(tier)
    first, last = group * span, min(layout.num_gpus, (group + 1) * span)
    if tier == 0:
        gpn = layout.gpus_per_node
        return Item("node", first // gpn, -(-last // gpn))
    below = layout.span(tier - 1)
    return Item(f"tier:{tier - 1}", first // below, -(-last // below))


def _gpus_of(layout: Layout, level: str, lo: int, hi: int) -> tuple[int, int]:
    """The GPU range [first, last) items ``lo..hi`` of ``level`` cover."""
    size = layout.gpus_per_node if level == "node" else layout.span(int(level.split(":")[1]))
    return lo * size, min(layout.num_gpus, hi * size)


def _nodes_of(layout: Layout, level: str, lo: int, hi: int) -> range:
    first, last = _gpus_of(layout, level, lo, hi)
    return range(first // layout.gpus_per_node, -(-last // layout.gpus_per_node))


def _at(level: str, lo: int, hi: int) -> str:
    return f"node:{lo}:{hi}" if level == "node" else f"tier:{level.split(':')[1]}:{lo}:{hi}"


def _state_of(placement: Placement, nodes: range) -> tuple[str, str, dict[str, int]]:
    """(worst state, worst link state, counts of node states) over ``nodes`` (only those reported)."""
    counts: dict[str, int] = {}
    states, links = [], []
    for k in nodes:
        if k not in placement.by_node:
            continue
        s = placement.node_state(k)
        counts[s] = counts.get(s, 0) + 1
        states.append(s)
        links.append(placement.link_state(k))
    return worst(states), worst(links), counts


def view(layout: Layout, placement: Placement, item: Item) -> dict[str, Any]:
    """The elements of one view (Cytoscape's ``{data: ...}`` form) and what the page says beside them."""
    if item.level == "node" and item.hi - item.lo == 1:
        return node_view(layout, placement, item.lo)
    n = item.hi - item.lo
    band = max(1, math.ceil(n / MAX_BOXES))
    tier_above = 0 if item.level == "node" else int(item.level.split(":")[1]) + 1
    first, last = _gpus_of(layout, item.level, item.lo, item.hi)
    elements: list[dict[str, Any]] = []
    if tier_above < len(layout.tiers):
        t = layout.tiers[tier_above]
        count = layout.switches_in(tier_above, last - first)
        elements.append({"data": {"id": "switches", "kind": "switches", "state": "nodata",
                                  "label": f"{t['name']} switches ({_count(count)})",
                                  "detail": {"tier": t["name"], "switches": _count(count),
                                             "bw_GBps_per_gpu": t.get("bw_GBps_per_gpu"),
                                             "oversubscription": t.get("oversubscription"),
                                             "latency_us": t.get("latency_us")}}})
    for lo in range(item.lo, item.hi, band):
        hi = min(item.hi, lo + band)
        nodes = _nodes_of(layout, item.level, lo, hi)
        state, link, counts = _state_of(placement, nodes)
        at = _at(item.level, lo, hi) if hi - lo > 1 else (
            _at(*_drill(layout, item.level, lo)) if item.level != "node" else f"node:{lo}")
        label = _label(layout, placement, item.level, lo, hi, nodes)
        hosts = [placement.hosts[k] for k in nodes if k in placement.hosts][:8]
        box = f"box:{item.level}:{lo}:{hi}"
        elements.append({"data": {"id": box, "kind": "group" if item.level != "node" else "node", "state": state,
                                  "label": label, "at": at,
                                  "detail": {"nodes": f"{nodes.start}-{nodes.stop - 1}", "reported": counts,
                                             "hosts": hosts}}})
        if tier_above < len(layout.tiers):
            elements.append({"data": {"id": f"edge:{box}", "source": box, "target": "switches", "state": link,
                                      "kind": "uplink"}})
    return {"at": _at(item.level, item.lo, item.hi), "title": _title(layout, item), "elements": elements,
            "band": band, "items": n, "up": _parent(layout, item)}


def _drill(layout: Layout, level: str, index: int) -> tuple[str, int, int]:
    """What clicking group ``index`` of ``level`` opens: that group's children."""
    tier = int(level.split(":")[1])
    child = _children_of(layout, tier, index)
    return child.level, child.lo, child.hi


def _parent(layout: Layout, item: Item) -> str | None:
    """The view one step up (None at the top)."""
    top = _children_of(layout, len(layout.tiers) - 1, 0)
    if item == top:
        return None
    first, _ = _gpus_of(layout, item.level, item.lo, item.hi)
    # Items at a level are the children of a group one tier up; the view above shows that
    # group among its siblings: the children of the group two tiers up.
    if item.level == "node":
        parent_tier = 0 if item.hi - item.lo == 1 else 1
    else:
        parent_tier = int(item.level.split(":")[1]) + 2
    if parent_tier >= len(layout.tiers):
        return _at(top.level, top.lo, top.hi)
    group = first // layout.span(parent_tier)
    up = _children_of(layout, parent_tier, group)
    return _at(up.level, up.lo, up.hi)


def _count(x: float) -> str:
    return f"{x:,.0f}" if x >= 1 or x == 0 else f"{x:.2g}"


def _label(layout: Layout, placement: Placement, level: str, lo: int, hi: int, nodes: range) -> str:
    if level == "node":
        if hi - lo == 1:
            # A placed host shows its name under the node's index (host "node-2" may sit on node 1).
            host = placement.hosts.get(lo)
            return f"node {lo}" if host is None else f"{host}\nnode {lo}"
        return f"nodes {lo}-{hi - 1}"
    name = layout.tiers[int(level.split(":")[1])]["name"]
    what = f"{name} group {lo}" if hi - lo == 1 else f"{name} groups {lo}-{hi - 1}"
    return f"{what}\n{len(nodes):,} nodes"


def _title(layout: Layout, item: Item) -> str:
    first, last = _gpus_of(layout, item.level, item.lo, item.hi)
    what = "nodes" if item.level == "node" else f"{layout.tiers[int(item.level.split(':')[1])]['name']} groups"
    return f"{layout.name}: {what} {item.lo}-{item.hi - 1} (GPUs {first:,}-{last - 1:,} of {layout.num_gpus:,})"


def node_view(layout: Layout, placement: Placement, k: int) -> dict[str, Any]:
    """One node: its GPUs, NVLink switches, NICs (one per rail) and their links to the leaf."""
    comps = placement.by_node.get(k, [])
    host = placement.hosts.get(k, f"node {k}")

    def on(kinds: tuple[str, ...], rail: int) -> list[Mapping[str, Any]]:
        return [c for c in comps if c.get("kind") in kinds and rail_of(c) == rail]

    elements: list[dict[str, Any]] = []
    su = layout.scale_up
    chips = su.get("nvswitch_chips") or 0
    domains = su.get("domains") or 1
    per_domain = int(chips / domains) if chips else 0
    elements.append({"data": {"id": "scaleup", "kind": "switches", "state": "nodata",
                              "label": f"{su.get('kind', 'scale-up')} ({su.get('domain_gpus', layout.gpus_per_node)} "
                                       f"GPUs/domain" + (f", {per_domain} switch chips" if per_domain else "") + ")",
                              "detail": {k2: v for k2, v in su.items()}}})
    leaf = layout.tiers[0]["name"] if layout.tiers else "leaf"
    elements.append({"data": {"id": "leaf", "kind": "switches", "state": "nodata", "label": f"{leaf} switches",
                              "detail": {"tier": leaf}}})
    for g in range(layout.gpus_per_node):
        gpu = on(("gpu",), g)
        nvl = on(("nvlink",), g)
        elements.append({"data": {"id": f"gpu:{g}", "kind": "gpu", "state": worst(c["state"] for c in gpu),
                                  "label": f"GPU {g}", "components": [c["id"] for c in gpu]}})
        elements.append({"data": {"id": f"nvl:{g}", "source": f"gpu:{g}", "target": "scaleup", "kind": "nvlink",
                                  "state": worst(c["state"] for c in nvl), "components": [c["id"] for c in nvl]}})
    for r in range(layout.nics_per_node):
        port = on(LINK_KINDS, r)
        state = worst(c["state"] for c in port)
        elements.append({"data": {"id": f"nic:{r}", "kind": "nic", "state": state, "label": f"NIC {r}",
                                  "components": [c["id"] for c in port]}})
        elements.append({"data": {"id": f"rail:{r}", "source": f"nic:{r}", "target": "leaf", "kind": "link",
                                  "state": state, "components": [c["id"] for c in port]}})
        g = r * layout.gpus_per_node // max(1, layout.nics_per_node)
        elements.append({"data": {"id": f"pcie:{r}", "source": f"gpu:{g}", "target": f"nic:{r}", "kind": "pcie",
                                  "state": "nodata"}})
    if layout.memory:
        elements.append({"data": {"id": "memory", "kind": "memory", "state": "nodata",
                                  "label": f"{layout.memory.get('kind', 'memory')} pool",
                                  "detail": dict(layout.memory)}})
        elements.append({"data": {"id": "memory-link", "source": "scaleup", "target": "memory", "kind": "memory",
                                  "state": worst(c["state"] for c in comps if c.get("kind") == "cxl")}})
    item = Item("node", k, k + 1)
    return {"at": f"node:{k}", "title": f"{layout.name}: {host} (node {k} of {layout.nodes:,})",
            "elements": elements, "band": 1, "items": 1, "up": _parent(layout, item),
            "components": [dict(c) for c in comps]}


def summary(layout: Layout) -> dict[str, Any]:
    """The fabric in figures, for the side panel: tiers, scale-up, optics, memory pool."""
    return {"name": layout.name, "num_gpus": layout.num_gpus, "nodes": layout.nodes,
            "gpus_per_node": layout.gpus_per_node, "nics_per_node": layout.nics_per_node,
            "tiers": [dict(t) for t in layout.tiers], "scale_up": dict(layout.scale_up),
            "scale_out": dict(layout.scale_out), "optics": dict(layout.optics) if layout.optics else None,
            "memory": dict(layout.memory) if layout.memory else None}
