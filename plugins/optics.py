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
