"""Optics of the scale-out fabric: pluggable transceivers vs co-packaged optics (CPO).

What the choice changes: energy per bit (hence fabric power), reach, the switch radix a
switch package can carry (hence the number of tiers and switches), and the link failure
rate (used by failure scenarios).

Defaults and their sources:
- pluggable 800G (DR8/2xFR4) transceivers ~15 pJ/bit per end-to-end link including DSP
  (NVIDIA GTC 2025 Spectrum-X/Quantum-X Photonics announcement: 30 W-class 1.6T
  pluggables; CPO "3.5x more power efficient");
- co-packaged optics ~4.5 pJ/bit (the same announcement: 3.5x lower than pluggables);
- radix: Quantum-2 NDR 64 x 400G ports; Quantum-X800 144 x 800G; Spectrum-X Photonics
  CPO up to 512 x 800G (same announcement);
- reach: DR optics 500 m on single-mode fibre (IEEE 802.3ck/df DR), CPO with external
  laser source ~2 km (FR-class);
- failure rate: annualised failure rate of pluggable optical transceivers ~0.5-1%/year
  in hyperscale fleets (Meta, "Optics at scale" OCP talks); CPO claims ~10x fewer
  link flaps and failures (NVIDIA, same announcement). Both are overridable parameters.
"""

from __future__ import annotations

from typing import Any

from twin.api import (
    LEVEL_NAMES,
    REROUTE_STALL_S,
    Cluster,
    ComponentGroup,
    Condition,
    FailureMode,
    Hierarchy,
    Impact,
    MetricMapping,
    OpticsModel,
    Scenario,
    SpecError,
    UplinkLoss,
    fat_tree_of,
    fat_tree_report,
    hookimpl,
    nic_share_factor,
)

DEFAULTS: dict[str, dict[str, float]] = {
    "pluggable": {"pj_per_bit": 15.0, "reach_m": 500.0, "annual_failure_rate": 0.008, "switch_radix": 0},
    "cpo": {"pj_per_bit": 4.5, "reach_m": 2000.0, "annual_failure_rate": 0.0008, "switch_radix": 144},
}
PARAMS = {"pj_per_bit", "reach_m", "annual_failure_rate", "switch_radix", "max_link_length_m"}


class _Optics(OpticsModel):
    kind = ""

    def params(self, cluster: Cluster) -> dict[str, float]:
        """Defaults merged with the cluster's overrides."""
        assert cluster.optics is not None
        return {**DEFAULTS[self.kind], **cluster.optics.params}

    def validate(self, cluster: Cluster, path: str) -> None:
        assert cluster.optics is not None
        for key, value in cluster.optics.params.items():
            if key not in PARAMS:
                known = ", ".join(sorted(PARAMS))
                raise SpecError(f"{path}.optics.params.{key}",
                                f"unknown parameter for {self.kind} optics; expected one of: {known}")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise SpecError(f"{path}.optics.params.{key}", f"must be a number >= 0 (got {value!r})")
        p = self.params(cluster)
        if p.get("max_link_length_m", 0) > p["reach_m"]:
            raise SpecError(f"{path}.optics.params.max_link_length_m",
                            f"exceeds the optics reach ({p['reach_m']:.0f} m)")

    def switch_radix(self, cluster: Cluster) -> int | None:
        radix = int(self.params(cluster)["switch_radix"])
        return radix or None

    def report(self, cluster: Cluster, hierarchy: Hierarchy) -> dict[str, Any]:
        """The links of the fat tree the scale-out fabric is (at the radix these optics force)."""
        so = cluster.scale_out
        if so is None:
            return {"kind": self.kind}
        radix = self.switch_radix(cluster) or so.switch_radix
        fab = fat_tree_report(cluster, radix, so.fabric)
        return {**self._priced(cluster, fab["links"]), "switch_radix": radix, "tiers": fab["tiers"],
                "switches": fab["switches"], "switches_per_tier": fab["switches_per_tier"]}

    def links_report(self, cluster: Cluster, hierarchy: Hierarchy, links: int) -> dict[str, Any]:
        """The optical links a torus or dragonfly counts itself (its report has its shape)."""
        if cluster.scale_out is None:
            return {"kind": self.kind}
        return self._priced(cluster, links)

    def _priced(self, cluster: Cluster, links: int) -> dict[str, Any]:
        """Energy and failures of ``links`` optical links at the cluster's NIC rate."""
        p = self.params(cluster)
        so = cluster.scale_out
        assert so is not None
        # Each link carries nic_gbps in both directions; energy per bit applies per direction.
        power_w = links * so.nic_gbps * 1e9 * 2 * p["pj_per_bit"] * 1e-12
        return {"kind": self.kind, "pj_per_bit": p["pj_per_bit"], "reach_m": p["reach_m"], "links": links,
                "optics_power_kw": power_w / 1e3,
                "annual_failure_rate_per_link": p["annual_failure_rate"],
                "expected_link_failures_per_year": links * p["annual_failure_rate"]}


class PluggableOptics(_Optics):
    """Pluggable transceivers at both ends of each optical link."""

    kind = "pluggable"
    summary = "Pluggable optical transceivers (~15 pJ/bit, 500 m DR reach, ~0.8%/yr failures)"


class CoPackagedOptics(_Optics):
    """Co-packaged optics on the switch package: lower energy, higher radix, fewer failures."""

    kind = "cpo"
    summary = "Co-packaged optics (~4.5 pJ/bit, higher switch radix -> fewer tiers, ~10x fewer failures)"


@hookimpl
def twin_fabrics() -> list[OpticsModel]:
    """Register the optics models."""
    return [PluggableOptics(), CoPackagedOptics()]


# ------------------------------------------------------------------ failure scenarios
# Co-packaged switches feed their optical engines from pluggable external laser sources
# shared by several ports: NVIDIA Quantum-X Photonics (Q3450-LD) carries 144 x 800G ports
# fed by 18 detachable light-source modules, i.e. 8 ports per laser module (Lambda /
# NVIDIA, 2025). One laser module failing takes those ports down together.
PORTS_PER_LASER = 144 // 18


def _optics_in_use(scenario: Scenario) -> str | None:
    c = scenario.cluster
    if c.optics is None or c.scale_out is None:
        return None
    return c.optics.kind


@hookimpl
def twin_components(scenario: Scenario, hierarchy: Hierarchy, switch_radix: int | None,
                    optical_links: int | None) -> list[ComponentGroup] | None:
    """Transceivers (pluggable), optical engines and laser sources (co-packaged)."""
    kind = _optics_in_use(scenario)
    if kind is None:
        return None
    cluster = scenario.cluster
    so = cluster.scale_out
    assert so is not None
    if optical_links is not None:
        # A torus or dragonfly counting its own optical links: an optical interface at each
        # end. Laser sources are laid out per fat-tree switch level (below), which these
        # topologies do not have: not modelled here.
        src = f"optics plugin ({kind}); the {so.fabric} fabric's {optical_links} optical links"
        if kind == "pluggable":
            return [ComponentGroup("transceiver", "transceiver", 2 * optical_links, "pluggable",
                                   attrs={"packaging": "pluggable", "per_link": 2}, source=src)]
        return [ComponentGroup("optical_engine", "optical_engine", 2 * optical_links, "cpo",
                               attrs={"packaging": "co-packaged", "where": "both ends of each optical link"},
                               source=src + " (external laser sources not modelled for this topology)")]
    radix = switch_radix or so.switch_radix
    tree = fat_tree_of(cluster, radix)
    copies = cluster.nics_per_node if so.topology == "rail_optimized" else 1
    endpoint = tree.endpoints * copies
    inter = sum(lv.up_links for lv in tree.levels) * copies
    src = f"optics plugin ({kind}); links from the fat tree of radix {radix}"
    if kind == "pluggable":
        return [ComponentGroup("transceiver", "transceiver", 2 * (endpoint + inter), "pluggable",
                               attrs={"packaging": "pluggable", "per_link": 2}, source=src)]
    groups = [ComponentGroup("transceiver", "transceiver", endpoint, "cpo",
                             attrs={"packaging": "pluggable", "where": "NIC end of each endpoint link"}, source=src),
              ComponentGroup("optical_engine", "optical_engine", endpoint + 2 * inter, "cpo",
                             attrs={"packaging": "co-packaged", "where": "every switch port"}, source=src)]
    for i, level in enumerate(tree.levels):
        ports = (level.down_links + level.up_links) * copies
        groups.append(ComponentGroup(f"laser_source.{LEVEL_NAMES[i]}", "laser_source",
                                     -(-ports // PORTS_PER_LASER), "cpo", tier=i + 1,
                                     attrs={"level": i, "ports_per_laser": PORTS_PER_LASER}, source=src))
    return groups


@hookimpl
def twin_failure_modes(component: ComponentGroup, scenario: Scenario, hierarchy: Hierarchy,
                       switch_radix: int | None, optical_links: int | None) -> list[FailureMode] | None:
    """Optical failures of the fabric's links (replacing the generic cable rate) and lasers."""
    kind = _optics_in_use(scenario)
    if kind is None:
        return None
    cluster = scenario.cluster
    so = cluster.scale_out
    assert so is not None and cluster.optics is not None
    afr = float({**DEFAULTS[kind], **cluster.optics.params}["annual_failure_rate"])
    # Electrical links of the fabric (a dragonfly's cables inside a group) keep their own rate.
    if component.kind == "link" and component.fabric == so.fabric and component.attrs.get("medium") != "electrical":
        return [FailureMode(component.name, "optics", "down", afr,
                            f"{kind} optics annual failure rate per link (plugins/optics.py: Meta 'Optics at scale'; "
                            "CPO ~10x fewer, NVIDIA GTC 2025)", interrupts=False, same_as="down", supersedes=("down",),
                            priority=10, description=f"{kind} optical link fails (transceiver/laser/fibre)")]
    if component.kind != "laser_source":
        return None
    radix = switch_radix or so.switch_radix
    tree = fat_tree_of(cluster, radix)
    level = int(component.attrs["level"])
    here = tree.levels[level]
    rail = so.topology == "rail_optimized"
    no_rate = "no published external-laser failure rate (set failures.rates); the link rate covers CPO optics"
    common = {"detection_s": 30.0, "repair_h": 4.0, "repair_source": "assumption (a hot-swappable laser module)"}
    p = PORTS_PER_LASER
    modes = []
    if level == 0:
        # The laser feeds down ports: that many NICs lose their link (the job crashes).
        nics = cluster.nics_per_node
        share = nic_share_factor(cluster.gpus_per_node, nics)
        nodes = p if rail else max(1, p // max(1, nics))
        degraded = None if share is None or not rail else Impact(
            tier_bw=tuple((t, share) for t in range(1, len(hierarchy.tiers))),
            note=f"{nodes} nodes each run on {nics - 1} of {nics} NICs")
        modes.append(FailureMode(component.name, "down_ports", "down", None, no_rate, interrupts=True,
                                 nodes_lost=nodes, degraded=degraded, **common,
                                 description=f"external laser of a leaf's down ports fails: {p} NIC links go dark"))
    else:
        below = tree.levels[level - 1]
        up_below = below.up_links / below.switches
        impact = Impact(uplinks=(UplinkLoss(tier=level + 1, uplinks=up_below, lost=1.0),), stall_s=REROUTE_STALL_S,
                        note=f"{p} switches below each lose 1 of {up_below:g} uplinks")
        modes.append(FailureMode(component.name, "down_ports", "down", None, no_rate, interrupts=False,
                                 degraded=impact, **common,
                                 description=f"external laser of a {LEVEL_NAMES[level]}'s down ports fails: "
                                             f"{p} links re-route"))
    if here.up_links:
        up = here.up_links / here.switches
        lost = min(float(p), up)
        impact = Impact(uplinks=(UplinkLoss(tier=level + 2, uplinks=up, lost=lost),), stall_s=REROUTE_STALL_S,
                        note=f"one {LEVEL_NAMES[level]} loses {lost:g} of {up:g} uplinks")
        modes.append(FailureMode(component.name, "up_ports", "down", None, no_rate, interrupts=False,
                                 degraded=impact, **common,
                                 description=f"external laser of a {LEVEL_NAMES[level]}'s up ports fails: "
                                             f"{lost:g} uplinks re-route"))
    return modes


# ----------------------------------------------------------------------- telemetry
# Transceiver digital optical monitoring (DOM, SFF-8636 / CMIS) and FEC statistics. No
# single exporter owns these names: switch and host exporters publish the module's DOM
# pages as transceiver_* / optics_* gauges (per lane or channel) and FEC counters as the
# Linux ethtool FEC statistics (corrected/uncorrectable blocks) or mlx5's phy counters.
# Thresholds: IEEE 802.3bs 400GBASE-DR4 (Table 124-7: average receive power per lane
# min -5.9 dBm; Table 124-6: launch power min -2.9 dBm); KP4 RS(544,514) FEC corrects up to
# a pre-FEC BER of 2.4e-4 (IEEE 802.3bs); QSFP-DD/OSFP modules are rated to 70 C case
# temperature (commercial class, SFF-8636/CMIS).
_XCVR = ("device|interface|port",)
_DR4 = "IEEE 802.3bs 400GBASE-DR4"
OPTICS_MAPPINGS = [
    MetricMapping(("{*}transceiver_rx_power_dbm", "{*}optics_rx_power_dbm", "{*}module_rx_power_dbm"),
                  "transceiver", "rx_power_dbm", identity=_XCVR, detail=("lane|channel",), aggregate="min",
                  tier="scale_out", unit="dBm",
                  conditions=(Condition("degraded", "<", -5.9, f"receive power below the {_DR4} minimum -5.9 dBm "
                                        "(dirty or damaged fibre, failing laser at the far end)"),),
                  source="DOM receive power per lane"),
    MetricMapping(("{*}transceiver_tx_power_dbm", "{*}optics_tx_power_dbm", "{*}module_tx_power_dbm"),
                  "transceiver", "tx_power_dbm", identity=_XCVR, detail=("lane|channel",), aggregate="min",
                  tier="scale_out", unit="dBm",
                  conditions=(Condition("degraded", "<", -2.9,
                                        f"launch power below the {_DR4} minimum -2.9 dBm (laser ageing)"),),
                  source="DOM transmit power per lane"),
    MetricMapping(("{*}transceiver_temperature_celsius", "{*}transceiver_temperature", "{*}optics_temperature_c"),
                  "transceiver", "temperature_c", identity=_XCVR, aggregate="max", tier="scale_out", unit="C",
                  conditions=(Condition("degraded", ">", 70.0, "module above its 70 C rated case temperature"),),
                  source="DOM module temperature"),
    MetricMapping(("{*}transceiver_pre_fec_ber", "{*}phy_pre_fec_ber", "{*}pre_fec_ber"), "transceiver",
                  "pre_fec_ber", identity=_XCVR, aggregate="max", tier="scale_out",
                  conditions=(Condition("degraded", ">", 2.4e-4,
                                        "pre-FEC BER above the KP4 RS(544,514) correction limit 2.4e-4"),),
                  source="pre-FEC bit error ratio (gauge)"),
    MetricMapping(("{*}transceiver_post_fec_ber", "{*}phy_post_fec_ber", "{*}post_fec_ber"), "transceiver",
                  "post_fec_ber", identity=_XCVR, aggregate="max", tier="scale_out",
                  conditions=(Condition("degraded", ">", 0.0, "post-FEC errors: frames are being lost"),),
                  source="post-FEC bit error ratio (gauge)"),
    MetricMapping(("{*}fec_uncorrectable_blocks", "{*}rx_fec_uncorrectable_blocks", "{*}rx_uncorrectable_errors_phy"),
                  "transceiver", "fec_uncorrectable_per_s", kind="counter", identity=_XCVR, tier="scale_out",
                  unit="1/s",
                  conditions=(Condition("degraded", ">", 0.0, "uncorrectable FEC codewords: frames are being lost"),),
                  source="Linux ethtool FEC statistics (uncorrectable_blocks) / mlx5 phy counter"),
    MetricMapping(("{*}fec_corrected_blocks", "{*}rx_fec_corrected_blocks", "{*}rx_corrected_bits_phy"),
                  "transceiver", "fec_corrected_per_s", kind="counter", identity=_XCVR, tier="scale_out",
                  unit="1/s", source="Linux ethtool FEC statistics (corrected_blocks) / mlx5 rx_corrected_bits_phy"),
]


@hookimpl
def twin_metric_mappings() -> list[MetricMapping]:
    """Transceiver DOM (power, temperature) and FEC metrics."""
    return list(OPTICS_MAPPINGS)
