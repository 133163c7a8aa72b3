"""UALink scale-up domains: accelerators joined through UALink switches (UALink 200G 1.0).

UALink is an open, memory-semantic scale-up interconnect: each accelerator reaches every other
of its pod through one UALink switch, as NVLink through NVSwitch (UALink Consortium, "UALink
200G 1.0 Specification", ratified April 2025; "UALink 200G 1.0 Specification Overview"):

- lanes of 200 Gb/s (212.5 GT/s signalling), ports of 1, 2 or 4 lanes (800 Gb/s per x4 port);
  an accelerator has as many ports as its design gives it, so the scenario states its lanes
  (``scale_up.params.lanes``: 200 Gb/s lanes per accelerator) or its bandwidth
  (``scale_up.link_GBps``, per accelerator per direction) - there is no product to default from;
- up to 1,024 accelerators in a pod (one switch hop between any two);
- "93% effective peak bandwidth" (UALink Consortium press release of the 1.0 specification):
  the achieved fraction of the line rate, the protocol's own efficiency (no measured collective
  figure exists yet);
- switch port-to-port latency "<= 150 ns" for a 25T switch, "< 200 ns" for 50T and "< 250 ns"
  for 100T (UALink Consortium, "A Deeper Dive: Responding to the UALink 200G 1.0 Specification
  Webinar Q&A"); reported only: on a switched domain the collective library's own per-step
  latencies cost the steps (as on NVLink), so ``scale_up.latency_us`` is refused.
- no in-switch reduction in 1.0 (loads, stores and atomics only): collectives run as rings.
"""

from __future__ import annotations

from typing import Any

from twin.api import (
    Cluster,
    Hierarchy,
    ScaleUpFabric,
    SpecError,
    Tier,
    check_scale_up_params,
    hookimpl,
    read_param,
    reject_scale_up_fields,
)

LANE_GBPS = 200.0          # UALink 200G 1.0: 200 Gb/s per lane
MAX_POD = 1024             # accelerators per UALink pod
EFFECTIVE = 0.93           # "93% effective peak bandwidth" (UALink 1.0 press release)
SWITCH_LATENCY_NS = {25.6: 150.0, 51.2: 200.0, 102.4: 250.0}  # switch Tb/s -> port-to-port ns (webinar Q&A)
PARAMS = {"lanes"}
UNMODELLED = {
    "generation": "UALink 200G 1.0 is the one generation modelled",
    "nvls": "UALink 1.0 switches do not reduce (loads, stores and atomics only)",
    "latency_us": "the collective library's per-step latencies cost a switched domain's steps; the switch's "
                  "port-to-port latency is reported",
}


def _bandwidth_GBps(cluster: Cluster, path: str) -> float:
    """Per accelerator per direction: ``link_GBps``, or ``params.lanes`` x 200 Gb/s."""
    up = cluster.scale_up
    lanes = read_param(up.params, f"{path}.scale_up.params.lanes", None, integer=True, minimum=1, maximum=4096)
    if up.link_GBps and lanes is not None:
        raise SpecError(f"{path}.scale_up.params.lanes", "state either lanes or scale_up.link_GBps, not both")
    if up.link_GBps:
        return up.link_GBps
    if lanes is None:
        raise SpecError(f"{path}.scale_up.params.lanes", "is required for ualink (or scale_up.link_GBps): 200 Gb/s "
                                                         "lanes per accelerator, e.g. 16 for four x4 ports")
    return lanes * LANE_GBPS / 8.0


class UALinkFabric(ScaleUpFabric):
    """UALink: one switch hop between any two accelerators of a pod of up to 1,024."""

    kind = "ualink"
    summary = "UALink 200G 1.0 switched scale-up: up to 1,024 accelerators, 200G lanes, 93% effective bandwidth"

    def validate(self, cluster: Cluster, path: str) -> None:
        """A pod of at most 1,024; lanes or a bandwidth; no NVLink figures."""
        check_scale_up_params(cluster, path, PARAMS, self.kind)
        reject_scale_up_fields(cluster, path, self.kind, UNMODELLED)
        if cluster.scale_up.domain_gpus > MAX_POD:
            raise SpecError(f"{path}.scale_up.domain_gpus", f"a UALink pod has at most {MAX_POD} accelerators "
                                                            f"(got {cluster.scale_up.domain_gpus})")
        if cluster.gpu.nvlink_GBps:
            raise SpecError(f"{path}.gpu.nvlink_GBps", "NVLink bandwidth does not apply to a ualink domain: state "
                                                       "scale_up.params.lanes or scale_up.link_GBps")
        _bandwidth_GBps(cluster, path)

    def tier(self, cluster: Cluster) -> Tier:
        """A switched domain at UALink's effective bandwidth."""
        up = cluster.scale_up
        frac = up.achievable_fraction or EFFECTIVE
        return Tier(name="ualink", fabric=self.kind, span_gpus=max(1, min(up.domain_gpus, cluster.num_gpus)),
                    bw_Bps=_bandwidth_GBps(cluster, "cluster") * 1e9 * frac, latency_s=0.0)

    def report(self, cluster: Cluster, hierarchy: Hierarchy) -> dict[str, Any]:
        """Bandwidth, lanes and the switch latencies the specification's authors target."""
        gbps = _bandwidth_GBps(cluster, "cluster")
        return {"kind": self.kind, "domain_gpus": cluster.scale_up.domain_gpus, "GBps_per_direction": gbps,
                "lanes_200g": gbps * 8.0 / LANE_GBPS, "effective_fraction": EFFECTIVE,
                "switch_port_to_port_ns": {f"{tbps:g}T": ns for tbps, ns in SWITCH_LATENCY_NS.items()},
                "source": "UALink Consortium: UALink 200G 1.0 specification (2025) and webinar Q&A"}


@hookimpl
def twin_fabrics() -> list[ScaleUpFabric]:
    """Register the UALink domain."""
    return [UALinkFabric()]
