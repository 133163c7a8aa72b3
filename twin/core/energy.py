"""Energy and cost of a training step: what each component draws over the step's time.

The model (written once; one scenario's numbers and a batch's arrays run the same
:func:`step_terms`):

- GPUs draw their *busy* power while they compute (forward, backward, recomputation, the
  optimizer step and the compute slowed by overlapped communication) and their *waiting*
  power for the rest of the step (exposed communication, pipeline bubble, exposed
  offload): ``E_gpu = N x (P_busy x t_busy + P_wait x (t_step - t_busy))``. Training's
  compute phases run at TDP and its communication phases far below (Patel et al.,
  "Characterizing Power Management Opportunities for LLMs in the Cloud", ASPLOS 2024: the
  peak power of training iterations reaches or exceeds TDP, with large swings between the
  compute- and the communication-intensive phases; Choukse et al., "Power Stabilization
  for AI Training Datacenters", arXiv 2508.14318, 2025: compute-heavy phases draw much
  more power than communication phases; NVIDIA, "How New GB300 NVL72 Features Provide
  Steady Power for AI", 2025: training moves abruptly between idle and high-power
  states). ``P_busy = tdp_w x gpu_busy_fraction``
  (default 1.0: TDP); ``P_wait = gpu_idle_w``, which has no published per-GPU figure
  shipped: unset, waiting time is charged at busy power (an upper bound, said so in the
  estimate).
- NICs, switches, optics, hosts and CXL devices draw a constant power over the step:
  ``E = P x t_step``. Their counts come from the cluster and its fabric models' reports
  (switches per tier from the fat tree the fabric is sized as, ``twin.core.fattree``;
  optics power from the optics model's pJ/bit x line rate x links); their powers from
  ``cluster.power`` (a figure left unset is not counted, and listed as such).
- The facility adds ``(PUE - 1) x E_IT`` (cooling, power distribution; The Green Grid,
  "PUE: a comprehensive examination of the metric", White Paper 49, 2012). The default PUE
  1.0 reports IT energy only.

Cost per step (only from prices the user gives, ``cluster.prices``; none given: no cost):
``usd_per_gpu_hour x N x t/3600 + capex_usd_per_gpu x N x t / (amortisation_years x year)
+ usd_per_kwh x E / 3.6e6`` (straight-line amortisation over Julian years; 1 kWh = 3.6 MJ).

Approximations: every GPU gets the bottleneck stage's busy time (other pipeline stages of
an uneven layout wait a little longer); component powers are typical figures, not
load-dependent.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from twin.core import ops
from twin.core.errors import SpecError
from twin.core.estimate import Cost, Energy
from twin.core.specs import YEAR_S, Cluster

JOULES_PER_KWH = 3.6e6
# The components of a step's energy, in the order they are summed (the breakdown's order).
COMPONENTS = ("gpu", "nic", "switch", "optics", "host", "cxl", "facility")
IDLE_AS_BUSY = "GPU waiting time charged at busy power (an upper bound): no cluster.power.gpu_idle_w given"


@dataclass(frozen=True, slots=True)
class PowerFacts:
    """What a cluster draws, per component (one per cluster; or, for a batch, per point:
    see :func:`stack`). Powers in W for the whole cluster except the GPUs' (per GPU);
    prices folded to rates: ``gpu_usd_per_s`` per GPU-second (the GPU-hour price, or the
    capex amortisation: one of them) and ``usd_per_j``. An unset figure is 0 and named in
    ``not_counted``; ``assumed`` says what stands in for a figure not given; ``counts``:
    GPUs, nodes, NICs, switches per tier and CXL devices priced.
    """

    gpus: Any
    gpu_busy_w: Any
    gpu_wait_w: Any
    nic_w: Any
    switch_w: Any
    optics_w: Any
    host_w: Any
    cxl_w: Any
    pue: Any
    gpu_usd_per_s: Any
    usd_per_j: Any
    priced: Any
    not_counted: tuple[str, ...] = ()
    assumed: tuple[str, ...] = ()
    counts: Mapping[str, Any] = dataclasses.field(default_factory=dict)


_STACKED = ("gpus", "gpu_busy_w", "gpu_wait_w", "nic_w", "switch_w", "optics_w", "host_w", "cxl_w", "pue",
            "gpu_usd_per_s", "usd_per_j", "priced")


def stack(facts: Sequence[PowerFacts], index: np.ndarray) -> PowerFacts:
    """Per point, the facts of ``facts[index[i]]`` (arrays; for a batch)."""
    return PowerFacts(**{f: np.asarray([getattr(x, f) for x in facts])[index] for f in _STACKED})


def _switches_per_tier(report: Mapping[str, Any]) -> list[float] | None:
    """Switches per tier (leaf first) of the scale-out fabric, or None if it reports none.

    The report is of the fabric as built: at the switch radix the optics force when they do
    (``TwinModel.as_built``: co-packaged optics switches carry 144 ports).
    """
    fabric = report.get("scale_out")
    if not isinstance(fabric, Mapping) or fabric.get("switches_per_tier") is None:
        return None
    return [float(s) for s in fabric["switches_per_tier"]]


def power_facts(cluster: Cluster, report: Mapping[str, Any], path: str = "cluster") -> PowerFacts:
    """The power of every component of ``cluster`` (``report``: its fabric models' reports,
    ``TwinModel.cluster_report``). SpecError if ``power.switch_w`` does not fit the fabric's tiers.
    """
    pw, pr = cluster.power, cluster.prices
    nodes = cluster.num_nodes
    gpus = float(cluster.num_gpus)
    missing: list[str] = []
    if cluster.gpu.tdp_w is None:  # no published board power (e.g. Google TPUs, AWS Trainium): not counted
        busy = 0.0
        missing.append(f"GPUs (gpu.tdp_w: no published board power for {cluster.gpu.name or 'this GPU'})")
    else:
        busy = cluster.gpu.tdp_w * pw.gpu_busy_fraction
    counts: dict[str, Any] = {"gpus": cluster.num_gpus, "nodes": nodes}
    nic_w = switch_w = optics_w = cxl_w = 0.0
    if cluster.scale_out is not None:
        nics = nodes * cluster.nics_per_node
        counts["nics"] = nics
        if pw.nic_w is None:
            missing.append("NICs (cluster.power.nic_w)")
        else:
            nic_w = nics * pw.nic_w
        per_tier = _switches_per_tier(report)
        if per_tier is not None:
            counts["switches_per_tier"] = per_tier
        if pw.switch_w:
            if not per_tier:
                why = "has no switches (0 switch tiers)" if per_tier == [] else "reports no switch counts"
                raise SpecError(f"{path}.power.switch_w", f"the {cluster.scale_out.fabric} fabric {why} "
                                                          "to apply it to")
            if len(pw.switch_w) not in (1, len(per_tier)):
                raise SpecError(f"{path}.power.switch_w", f"must have one entry, or one per switch tier "
                                                          f"({len(per_tier)}) (got {len(pw.switch_w)})")
            watts = pw.switch_w * len(per_tier) if len(pw.switch_w) == 1 else pw.switch_w
            switch_w = sum(n * w for n, w in zip(per_tier, watts, strict=True))
        elif per_tier:
            missing.append("switches (cluster.power.switch_w)")
        optics = report.get("optics")
        kw = optics.get("optics_power_kw") if isinstance(optics, Mapping) else None
        if cluster.optics is None:
            missing.append("optics (no cluster.optics: transceivers not modelled)")
        elif kw is None:
            missing.append(f"optics (the {cluster.optics.kind} optics model reports no power)")
        else:
            optics_w = float(kw) * 1e3
    host_w = 0.0
    if pw.host_w is None:
        missing.append("hosts (cluster.power.host_w)")
    else:
        host_w = nodes * pw.host_w
    if cluster.memory_pool is not None:
        devices = nodes * cluster.memory_pool.devices_per_node
        counts["cxl_devices"] = devices
        if pw.cxl_device_w is None:
            missing.append("CXL devices (cluster.power.cxl_device_w)")
        else:
            cxl_w = devices * pw.cxl_device_w
    rental = (pr.usd_per_gpu_hour or 0.0) / 3600.0
    capex = 0.0
    if pr.capex_usd_per_gpu is not None and pr.amortisation_years is not None:
        capex = pr.capex_usd_per_gpu / (pr.amortisation_years * YEAR_S)
    return PowerFacts(gpus=gpus, gpu_busy_w=busy, gpu_wait_w=busy if pw.gpu_idle_w is None else pw.gpu_idle_w,
                      nic_w=nic_w, switch_w=switch_w, optics_w=optics_w, host_w=host_w, cxl_w=cxl_w, pue=pw.pue,
                      gpu_usd_per_s=rental + capex, usd_per_j=(pr.usd_per_kwh or 0.0) / JOULES_PER_KWH,
                      priced=pr.priced, not_counted=tuple(missing),
                      assumed=(IDLE_AS_BUSY,) if pw.gpu_idle_w is None and busy else (), counts=counts)


def step_terms(f: PowerFacts, step_s: Any, busy_s: Any, tokens: Any) -> dict[str, Any]:
    """Energy (J) and cost (USD) of a step of ``step_s`` in which the GPUs are busy ``busy_s``.

    Numbers for one scenario, arrays for a batch (``f`` from :func:`stack`); the same
    operations in the same order, so both give identical values. ``energy_j`` is the sum of
    the components in :data:`COMPONENTS` order; cost keys are meaningful where ``f.priced``.
    """
    wait_s = ops.maximum(step_s - busy_s, 0.0)
    out: dict[str, Any] = {"gpu_busy_s": busy_s, "gpu_wait_s": wait_s}
    out["gpu_j"] = f.gpus * (f.gpu_busy_w * busy_s + f.gpu_wait_w * wait_s)
    out["nic_j"] = f.nic_w * step_s
    out["switch_j"] = f.switch_w * step_s
    out["optics_j"] = f.optics_w * step_s
    out["host_j"] = f.host_w * step_s
    out["cxl_j"] = f.cxl_w * step_s
    it = out["gpu_j"] + out["nic_j"] + out["switch_j"] + out["optics_j"] + out["host_j"] + out["cxl_j"]
    out["facility_j"] = it * (f.pue - 1.0)
    total = it + out["facility_j"]
    out["energy_j"] = total
    out["joules_per_token"] = total / tokens
    # 0 where nothing is counted (no component with a power figure, e.g. a TPU slice without
    # published board power and no power figures stated): no energy to divide by.
    out["tokens_per_joule"] = ops.where(total > 0, tokens / ops.where(total > 0, total, 1.0), 0.0)
    out["average_power_w"] = total / step_s
    out["hardware_usd"] = f.gpu_usd_per_s * (f.gpus * step_s)
    out["electricity_usd"] = f.usd_per_j * total
    cost = out["hardware_usd"] + out["electricity_usd"]
    out["usd_per_step"] = cost
    out["usd_per_million_tokens"] = cost / tokens * 1e6
    return out


# Batch columns (``PointResults.columns``) -> the key of :func:`step_terms` they hold.
COLUMNS = {"energy_j": "energy_j", **{f"energy_{c}_j": f"{c}_j" for c in COMPONENTS},
           "joules_per_token": "joules_per_token", "tokens_per_joule": "tokens_per_joule",
           "average_power_w": "average_power_w"}
COST_COLUMNS = {"cost_usd_per_step": "usd_per_step", "usd_per_million_tokens": "usd_per_million_tokens"}


def step_energy(f: PowerFacts, step_s: float, busy_s: float, tokens: float) -> tuple[Energy, Cost | None]:
    """One scenario's :class:`Energy` and :class:`Cost` (None without prices), from :func:`step_terms`."""
    t = step_terms(f, step_s, busy_s, tokens)
    energy = Energy(gpu_j=t["gpu_j"], nic_j=t["nic_j"], switch_j=t["switch_j"], optics_j=t["optics_j"],
                    host_j=t["host_j"], cxl_j=t["cxl_j"], facility_j=t["facility_j"], total_j=t["energy_j"],
                    joules_per_token=t["joules_per_token"], tokens_per_joule=t["tokens_per_joule"],
                    average_power_w=t["average_power_w"], gpu_busy_s=busy_s, gpu_wait_s=t["gpu_wait_s"],
                    pue=f.pue, not_counted=f.not_counted, assumed=f.assumed)
    cost = None
    if f.priced:
        cost = Cost(usd_per_step=t["usd_per_step"], usd_per_million_tokens=t["usd_per_million_tokens"],
                    hardware_usd=t["hardware_usd"], electricity_usd=t["electricity_usd"])
    return energy, cost


# The rest of an Energy and a Cost a batch keeps, so that a row is a whole estimate
# (``twin.core.results.estimate_of_row``); column -> the key of :func:`step_terms`.
DETAIL_COLUMNS = {"gpu_busy_s": "gpu_busy_s", "gpu_wait_s": "gpu_wait_s"}
COST_DETAIL_COLUMNS = {"hardware_usd": "hardware_usd", "electricity_usd": "electricity_usd"}


def step_columns(f: PowerFacts, step_s: np.ndarray, busy_s: np.ndarray, tokens: np.ndarray) -> dict[str, np.ndarray]:
    """A batch's energy and cost columns (cost NaN where the point gives no prices), with the
    power usage effectiveness (``pue``) and the details of :data:`DETAIL_COLUMNS`.
    """
    t = step_terms(f, step_s, busy_s, tokens)
    out = {name: t[key] for name, key in (*COLUMNS.items(), *DETAIL_COLUMNS.items())}
    priced = np.asarray(f.priced, bool)
    for name, key in (*COST_COLUMNS.items(), *COST_DETAIL_COLUMNS.items()):
        out[name] = np.where(priced, t[key], np.nan)
    out["pue"] = np.broadcast_to(np.asarray(f.pue, np.float64), np.shape(step_s))
    return out


def columns_of(e: Energy, c: Cost | None) -> dict[str, float]:
    """The batch's energy and cost columns (:func:`step_columns`) of one scenario's estimate."""
    terms = {"energy_j": e.total_j, **{f"{k}_j": v for k, v in e.parts_j.items()},
             "joules_per_token": e.joules_per_token, "tokens_per_joule": e.tokens_per_joule,
             "average_power_w": e.average_power_w, "gpu_busy_s": e.gpu_busy_s, "gpu_wait_s": e.gpu_wait_s,
             "usd_per_step": math.nan if c is None else c.usd_per_step,
             "usd_per_million_tokens": math.nan if c is None else c.usd_per_million_tokens,
             "hardware_usd": math.nan if c is None else c.hardware_usd,
             "electricity_usd": math.nan if c is None else c.electricity_usd}
    names = {**COLUMNS, **COST_COLUMNS, **DETAIL_COLUMNS, **COST_DETAIL_COLUMNS}
    return {name: terms[key] for name, key in names.items()} | {"pue": e.pue}


def from_columns(row: Mapping[str, float]) -> tuple[Energy | None, Cost | None]:
    """One row's :class:`Energy` and :class:`Cost` (None without prices) from the batch's columns
    (:func:`step_columns`); None, None when the row has no energy. What a cluster gives no
    figure for (``not_counted``, ``assumed``) is one scenario's note, not a column.
    """
    if "energy_j" not in row or math.isnan(row["energy_j"]):
        return None, None
    energy = Energy(gpu_j=row["energy_gpu_j"], nic_j=row["energy_nic_j"], switch_j=row["energy_switch_j"],
                    optics_j=row["energy_optics_j"], host_j=row["energy_host_j"], cxl_j=row["energy_cxl_j"],
                    facility_j=row["energy_facility_j"], total_j=row["energy_j"],
                    joules_per_token=row["joules_per_token"], tokens_per_joule=row["tokens_per_joule"],
                    average_power_w=row["average_power_w"], gpu_busy_s=row.get("gpu_busy_s", math.nan),
                    gpu_wait_s=row.get("gpu_wait_s", math.nan), pue=row.get("pue", math.nan))
    usd = row.get("cost_usd_per_step", math.nan)
    if math.isnan(usd):
        return energy, None
    return energy, Cost(usd_per_step=usd, usd_per_million_tokens=row["usd_per_million_tokens"],
                        hardware_usd=row.get("hardware_usd", math.nan),
                        electricity_usd=row.get("electricity_usd", math.nan))
