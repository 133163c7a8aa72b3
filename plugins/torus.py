"""A torus (k-ary n-cube) of nodes as the scale-out fabric, TPU-ICI style.

Nodes sit on a ``params.dims`` grid ("4x4x4": nodes along each dimension, multiplying to
the node count) and each links to its two neighbours in every dimension, the last node
of a row wrapping round to the first (``params.wraparound``, default true; false: a mesh).
There are no switches. The node's ``scale_out.nics_per_node`` ports of ``nic_gbps`` each
(per direction) are the torus links, spread evenly over the 2 x D neighbour directions:
``nics_per_node // (2 D)`` parallel links to each neighbour (TPU v4: 6 ICI links per chip
in a 3D torus, Jouppi et al., ISCA 2023, "TPU v4: An Optically Reconfigurable
Supercomputer ..."; ports that do not divide evenly stay unused and are reported).

Tiers: one per dimension of size > 1, in the order given; tier i spans the GPUs of the
sub-torus of dimensions 1..i (span = gpus_per_node x product of those sizes), so a group
that fits in one ring of dimension 1 stays on tier 1.

Bandwidth per GPU per direction of tier i (what ring collectives see). A ring of one
dimension of size k runs both ways at once (two rings in opposite directions, each with
half the data), so a node moves 2 x L x b per direction, L links of b per neighbour.
A collective over m dimensions runs them concurrently on different parts of the data
(each part reduced dimension by dimension in a different order), keeping all 2 m links
busy: 2 m L b per node (the tiers are ``nested``: tier i's bandwidth holds the rings of
dimensions 1..i, so the core does not bound such a group by dimension 1's ring). That is
the bucket algorithm of Jain & Sabharwal, ICS 2010
("Optimal bucket algorithms for large MPI collectives on torus interconnects"), and the
2-D all-reduce of TPU pods (Ying et al. 2018, arXiv:1811.06992, "Image classification at
supercomputer scale", §3). Without wraparound a dimension is a line: the ring embedded in
it uses every link once each way, one ring instead of two, half the bandwidth (Dally &
Towles, "Principles and Practices of Interconnection Networks", 2004, ch. 5). Links run
at ``nic_efficiency`` of their rate (no published per-link ICI figure; the NIC-class
fraction is the assumption). Divided by gpus_per_node: the node's GPUs share its links.

All-to-all is bounded by the bisection instead (Dally & Towles §3.3): cutting a torus
across its largest dimension k severs 2 N/k node links per direction (the wraparound
doubles the cut; a mesh has one), and uniform traffic sends half of every node's bytes
across it, so a node injects at most 8 L b / k (4 L b / k for a mesh), and at most its
2 m L b. The tiers carry it as ``a2a_bw_Bps``; the core's all-to-all reads that field on
tier 0 only today, so all-to-all beyond the node is costed at the ring bandwidth
(docs/fidelity.md, "PCIe, TCP, torus and dragonfly fabrics").
"""

from __future__ import annotations

import math
from typing import Any

from twin.api import (
    DETECTION_CRASH_S,
    REPAIR_H,
    REPAIR_SOURCE,
    Cluster,
    ComponentGroup,
    FailureMode,
    Hierarchy,
    Impact,
    ScaleOutFabric,
    Scenario,
    SpecError,
    Tier,
    check_scale_out_params,
    gbps_to_bytes_per_s,
    hookimpl,
    hop_latency_s,
    network_rates,
    nic_efficiency,
    read_param,
    reject_scale_out_fields,
)

PARAMS = {"dims", "wraparound"}
MAX_DIMS = 6
AXES = ("x", "y", "z", "w", "v", "u")
NOT_MODELLED = {
    "tiers": "a torus has one tier per dimension (params.dims)",
    "oversubscription": "a torus has no switch uplinks; its bisection follows from params.dims",
    "tier_spans": "tier spans follow from params.dims",
    "gpus_per_leaf": "a torus has no leaf switches",
    "sharp": "a torus has no switches to reduce in",
    "adaptive_routing": "routing within the torus is not modelled (rings use neighbour links only)",
}
# Per-hop latency of a torus link (a collective's network step pays it where it exceeds
# NCCL's own per-step network latency, 2.7-14 us, i.e. rarely): an assumption of the order
# of a NIC-to-NIC hop (no switch), ~0.5 us as the cable + NIC part of plugins/infiniband.py's hop.
HOP_LATENCY_S = 0.5e-6


def parse_dims(cluster: Cluster, path: str = "cluster") -> tuple[int, ...]:
    """The torus dimensions in nodes, checked against the node count."""
    so = cluster.scale_out
    assert so is not None
    field = f"{path}.scale_out.params.dims"
    raw = so.params.get("dims")
    if raw is None:
        raise SpecError(field, f"is required for torus: nodes along each dimension, e.g. '4x4x4' "
                               f"multiplying to the node count ({cluster.num_nodes})")
    text = str(int(raw)) if isinstance(raw, (int, float)) and not isinstance(raw, bool) else str(raw)
    parts = text.lower().replace(" ", "").split("x")
    if not all(p.isdigit() and int(p) >= 1 for p in parts) or not 1 <= len(parts) <= MAX_DIMS:
        raise SpecError(field, f"must be 1 to {MAX_DIMS} positive whole numbers joined by 'x', e.g. '4x4x4' "
                               f"(got {raw!r})")
    dims = tuple(int(p) for p in parts)
    if math.prod(dims) != cluster.num_nodes:
        raise SpecError(field, f"must multiply to the node count {cluster.num_nodes} "
                               f"(num_gpus / gpus_per_node) (got {'x'.join(map(str, dims))} = {math.prod(dims)})")
    return dims


def _links(cluster: Cluster, dims: tuple[int, ...]) -> int:
    """Parallel links to each neighbour: the node's ports over its 2 x D neighbour directions."""
    used = sum(1 for k in dims if k > 1)
    return cluster.nics_per_node // (2 * used) if used else 0


def _wraparound(cluster: Cluster, path: str = "cluster") -> bool:
    so = cluster.scale_out
    assert so is not None
    return bool(read_param(so.params, f"{path}.scale_out.params.wraparound", True, choices=(True, False)))


class TorusFabric(ScaleOutFabric):
    """k-ary n-cube of nodes: a tier per dimension, ring and bisection bandwidth from dims."""

    kind = "torus"
    summary = "Torus / 3D torus of nodes (TPU-ICI style): a tier per dimension, ring and bisection bandwidth"

    def validate(self, cluster: Cluster, path: str) -> None:
        """Dims multiply to the node count; enough ports for two links per dimension."""
        check_scale_out_params(cluster, path, PARAMS, self.kind)
        reject_scale_out_fields(cluster, path, self.kind, NOT_MODELLED)
        dims = parse_dims(cluster, path)
        _wraparound(cluster, path)
        used = sum(1 for k in dims if k > 1)
        if used and _links(cluster, dims) < 1:
            raise SpecError(f"{path}.scale_out.nics_per_node",
                            f"a torus of {used} dimension(s) needs at least {2 * used} ports per node "
                            f"(two neighbours per dimension) (got {cluster.nics_per_node})")
        if cluster.scale_up.domain_gpus > cluster.gpus_per_node:
            raise SpecError(f"{path}.scale_up.domain_gpus",
                            f"a torus joins nodes: the scale-up domain must fit in one node ({cluster.gpus_per_node})")

    def tiers(self, cluster: Cluster, radix: int | None) -> list[Tier]:
        """One tier per dimension of size > 1: ring bandwidth, bisection-bound all-to-all."""
        so = cluster.scale_out
        assert so is not None
        dims = parse_dims(cluster)
        wrap = _wraparound(cluster)
        link = gbps_to_bytes_per_s(so.nic_gbps) * _links(cluster, dims) * nic_efficiency(cluster)
        gpn = cluster.gpus_per_node
        ring = 2.0 if wrap else 1.0          # rings per dimension: both ways round, or one on a line
        cut = 8.0 if wrap else 4.0           # bisection bound numerator (module docstring)
        hop = hop_latency_s(cluster, HOP_LATENCY_S)  # scale_out.latency_us where stated
        tiers: list[Tier] = []
        span, used, kmax, hops = 1, 0, 1, 0.0
        for axis, k in zip(AXES, dims, strict=False):
            if k == 1:
                continue
            span *= k
            used += 1
            kmax = max(kmax, k)
            hops += k / 4 if wrap else k / 3   # mean minimal distance in a ring / a line (Dally & Towles §3.3)
            ring_bw = ring * used * link
            tiers.append(Tier(name=f"torus-{axis}", fabric=self.kind, span_gpus=span * gpn, bw_Bps=ring_bw / gpn,
                              latency_s=hop * max(1.0, hops),
                              a2a_bw_Bps=min(ring_bw, cut * link / kmax) / gpn, nested=True))
        if not tiers:  # one node: a tier that spans it, never crossed
            tiers.append(Tier(name="torus", fabric=self.kind, span_gpus=max(cluster.num_gpus, gpn),
                              bw_Bps=gbps_to_bytes_per_s(so.nic_gbps) * nic_efficiency(cluster), latency_s=0.0))
        return tiers

    def optical_links(self, cluster: Cluster) -> int | None:
        """Every link between nodes: with optics stated, the torus's node-to-node cables carry
        them (the twin does not know which neighbours share a rack and could use copper).
        """
        dims = parse_dims(cluster)
        return _link_count(cluster, dims) * _links(cluster, dims)

    def report(self, cluster: Cluster, hierarchy: Hierarchy) -> dict[str, Any]:
        """Dimensions, links and the bisection."""
        so = cluster.scale_out
        assert so is not None
        dims = parse_dims(cluster)
        wrap = _wraparound(cluster)
        used = sum(1 for k in dims if k > 1)
        per_neighbour = _links(cluster, dims)
        kmax = max(dims)
        nodes = cluster.num_nodes
        cut_links = (2 if wrap else 1) * nodes // kmax * per_neighbour if kmax > 1 else 0
        return {"kind": self.kind, "dims": list(dims), "wraparound": wrap, "links_per_neighbor": per_neighbour,
                "unused_ports_per_node": cluster.nics_per_node - 2 * used * per_neighbour,
                "links": _link_count(cluster, dims) * per_neighbour,
                "switches_per_tier": [],  # a direct network: the nodes' NICs link to each other
                "bisection_GBps_per_direction": cut_links * so.nic_gbps / 8.0}


@hookimpl
def twin_fabrics() -> list[ScaleOutFabric]:
    """Register the torus fabric."""
    return [TorusFabric()]


# ------------------------------------------------------------------ failure scenarios
def _ring_links(k: int, wrap: bool) -> int:
    """Links of one ring (or line) of k nodes: k with wraparound (2 when k = 2), k - 1 without."""
    if k <= 1:
        return 0
    return k if wrap else k - 1


def _link_count(cluster: Cluster, dims: tuple[int, ...]) -> int:
    wrap = _wraparound(cluster)
    nodes = cluster.num_nodes
    return sum(nodes // k * _ring_links(k, wrap) for k in dims if k > 1)


@hookimpl
def twin_components(scenario: Scenario, hierarchy: Hierarchy, switch_radix: int | None) -> list[ComponentGroup] | None:
    """The torus links, one group per dimension (tier = that dimension's tier)."""
    cluster = scenario.cluster
    so = cluster.scale_out
    if so is None or so.fabric != TorusFabric.kind:
        return None
    dims = parse_dims(cluster)
    wrap = _wraparound(cluster)
    per_neighbour = _links(cluster, dims)
    groups, tier = [], 0
    for axis, k in zip(AXES, dims, strict=False):
        if k == 1:
            continue
        tier += 1
        groups.append(ComponentGroup(f"link.torus-{axis}", "link", cluster.num_nodes // k * _ring_links(k, wrap)
                                     * per_neighbour, TorusFabric.kind, tier=tier,
                                     attrs={"dimension": axis, "size": k, "links_per_neighbor": per_neighbour,
                                            "wraparound": wrap, "gbps": so.nic_gbps},
                                     source=f"torus {'x'.join(map(str, dims))} (plugins/torus.py)"))
    return groups


@hookimpl
def twin_failure_modes(component: ComponentGroup, scenario: Scenario, hierarchy: Hierarchy,
                       switch_radix: int | None) -> list[FailureMode] | None:
    """A torus link fails: the job stops, then runs with that ring cut open until the repair.

    Dimension-order routing has no path around a dead link without re-routing support, so
    the job crashes (as a TPU slice with a failed ICI link is restarted; Jouppi et al. 2023
    route around failures by reconfiguring the optical switches, i.e. a restart). Rerun on
    the same nodes, the broken ring is a line: one ring instead of two in that dimension,
    so a tier of m dimensions (the dimension's own and those above it) keeps 2 m - 1 of its
    2 m concurrent rings: factor (2 m - 1) / 2 m, 1/2 when the dimension is the first. A
    mesh line cut in two leaves no ring in that dimension: its traffic detours through the
    others, taken as half the bandwidth (an assumption). Rate: the per-link rate of the
    Llama 3 fabric's cables (no published ICI link failure rate).
    """
    so = scenario.cluster.scale_out
    if so is None or component.fabric != TorusFabric.kind or so.fabric != TorusFabric.kind:
        return None
    if not component.name.startswith("link.torus-") or component.tier is None:
        return None
    if not bool(component.attrs.get("wraparound", True)):
        keep = {t: 0.5 for t in range(component.tier, len(hierarchy.tiers))}
        note = "a line of the mesh is cut: its two halves meet through the other dimensions"
    else:
        keep = {t: (2 * t - 1) / (2 * t) for t in range(component.tier, len(hierarchy.tiers))}
        note = f"one ring of dimension {component.attrs.get('dimension')} runs as a line"
    per_link, _, src = network_rates()
    return [FailureMode(component.name, "down", "down", per_link,
                        f"assumption: the per-link rate of {src}", interrupts=True,
                        degraded=Impact(tier_bw=tuple(sorted(keep.items())), note=note),
                        detection_s=DETECTION_CRASH_S, repair_h=REPAIR_H["link"], repair_source=REPAIR_SOURCE,
                        description="torus link fails (cable, transceiver or port)")]
