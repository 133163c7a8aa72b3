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

from twin_plugins.infiniband import fabric_report

from twin.core.api import OpticsModel
from twin.core.errors import SpecError
from twin.core.specs import Cluster
from twin.core.telemetry import Condition, MetricMapping
from twin.core.topology import Hierarchy
from twin.hookimpl import hookimpl

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
        p = self.params(cluster)
        so = cluster.scale_out
        if so is None:
            return {"kind": self.kind}
        radix = self.switch_radix(cluster) or so.switch_radix
        fab = fabric_report(cluster, radix, so.fabric)
        links = fab["links"]
        # Each link carries nic_gbps in both directions; energy per bit applies per direction.
        power_w = links * so.nic_gbps * 1e9 * 2 * p["pj_per_bit"] * 1e-12
        return {"kind": self.kind, "pj_per_bit": p["pj_per_bit"], "reach_m": p["reach_m"],
                "switch_radix": radix, "tiers": fab["tiers"], "switches": fab["switches"], "links": links,
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
