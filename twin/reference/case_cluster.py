"""A reference case's ``cluster`` as a :class:`Cluster`: GPU, scale-up domain and the
scale-out fabric with the spellings publishers use (CASES.md, "Fabric fields"), and the
rates the twin assumes where a source is silent (each with a note).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, get_args

from twin.core import schema
from twin.core.errors import SpecError
from twin.core.scenario_io import resolve_gpu
from twin.core.specs import Cluster, HostCpu, ScaleOut, ScaleUp
from twin.engine import Engine
from twin.reference.case_fields import _mapping, _number

_FABRIC_ALIASES = {"unknown": "infiniband", "ethernet": "ethernet"}
# Scale-out fields a reference case may state beyond fabric and rates (CASES.md,
# "Fabric fields"), with the spellings publishers use; they map onto ScaleOut.
_TOPOLOGY_SPELLINGS = {"railoptimized": "rail_optimized", "railoptimised": "rail_optimized", "rail": "rail_optimized",
                       "railaligned": "rail_optimized", "fattree": "fat_tree", "clos": "fat_tree"}
_ROUTING_SPELLINGS = {"ecmp": False, "static": False, "adaptive": True, "ar": True, "adaptiverouting": True}
_SCALE_OUT_PASSTHROUGH = ("sharp", "adaptive_routing", "switch_radix", "tiers", "gpus_per_leaf", "tier_spans",
                          "latency_us", "achievable_fraction", "params")
_SCALE_OUT_READ = {"fabric", "gbps_per_gpu", "nics_per_node", "topology", "oversubscription", "routing",
                   *_SCALE_OUT_PASSTHROUGH}


def _ratio(value: Any, path: str) -> float:
    """A taper as a number or a published ``"down:up"`` string (``"7:1"`` is 7)."""
    if isinstance(value, str) and ":" in value:
        down, _, up = value.partition(":")
        try:
            return float(down) / float(up)
        except (ValueError, ZeroDivisionError):
            raise SpecError(path, f"must be a number or 'down:up' (got {value!r})") from None
    return float(_number(value, path))


def _scale_out_extras(so: Mapping[str, Any], notes: list[str], path: str) -> dict[str, Any]:
    """The ScaleOut fields a case states beyond fabric and rates, normalised."""
    out: dict[str, Any] = {}
    topo = so.get("topology")
    if topo is not None:
        key = str(topo).lower().replace("-", "").replace("_", "").replace(" ", "")
        out["topology"] = _TOPOLOGY_SPELLINGS.get(key, str(topo))
    taper = so.get("oversubscription")
    if taper is not None:
        items = taper if isinstance(taper, (list, tuple)) else [taper]
        out["oversubscription"] = tuple(_ratio(v, f"{path}.oversubscription") for v in items)
    routing = so.get("routing")
    if routing is not None:
        key = str(routing).lower().replace("-", "").replace("_", "").replace(" ", "")
        if key not in _ROUTING_SPELLINGS:
            raise SpecError(f"{path}.routing", f"must be one of ecmp, static, adaptive (got {routing!r})")
        out["adaptive_routing"] = _ROUTING_SPELLINGS[key]
    for key in _SCALE_OUT_PASSTHROUGH:
        if so.get(key) is not None:
            out[key] = so[key]
    ignored = sorted(str(k) for k in so if k not in _SCALE_OUT_READ)
    if ignored:
        notes.append(f"{path} fields not read: {', '.join(ignored)}")
    return out


def _cluster(engine: Engine, c: Mapping[str, Any], notes: list[str], path: str,
             num_gpus: int | None = None) -> Cluster:
    c = _mapping(c, path)
    gpu = resolve_gpu(c.get("gpu"), engine.catalog, f"{path}.gpu")
    per_node = _number(c.get("gpus_per_node"), f"{path}.gpus_per_node", integer=True) or 8
    n = num_gpus or _number(c.get("num_gpus"), f"{path}.num_gpus", integer=True)
    if n is None:
        raise SpecError(f"{path}.num_gpus", "is required")
    su = _mapping(c.get("scale_up"), f"{path}.scale_up")
    fabric = str(su.get("fabric") or "nvlink")
    gen = None
    if fabric.startswith("nvlink"):
        gen = int(fabric[6:]) if fabric[6:].isdigit() else None
        fabric = "nvlink"
    domain = _number(su.get("domain_gpus"), f"{path}.scale_up.domain_gpus", integer=True) or per_node
    # ``params``: the scale-up fabric's own knobs (a torus's ``dims``), checked by its plugin.
    scale_up = ScaleUp(fabric=fabric, generation=gen, domain_gpus=domain,
                       params=dict(_mapping(su.get("params"), f"{path}.scale_up.params")))
    so = _mapping(c.get("scale_out"), f"{path}.scale_out")
    if str(so.get("fabric") or "").lower() == "none":  # one scale-up domain holds every GPU (a TPU slice)
        return Cluster(gpu=gpu, num_gpus=int(n), gpus_per_node=per_node, scale_up=scale_up, scale_out=None,
                       name=str(c.get("system") or ""), host_cpu=_host_cpu(c, path))
    kind = _FABRIC_ALIASES.get(str(so.get("fabric") or "unknown"), str(so.get("fabric") or "infiniband"))
    if (so.get("fabric") or "unknown") == "unknown":
        notes.append("scale-out fabric not published: InfiniBand assumed")
    per_gpu = _number(so.get("gbps_per_gpu"), f"{path}.scale_out.gbps_per_gpu")
    nics = _number(so.get("nics_per_node"), f"{path}.scale_out.nics_per_node", integer=True)
    if per_gpu is None:
        per_gpu = 400.0 if gpu.generation in ("hopper", "blackwell") else 200.0
        if nics:  # e.g. "4x 200 Gb/s dual-port HCAs": rate per port not stated
            per_gpu = 200.0 * nics / per_node
        notes.append(f"scale-out rate per GPU not published: {per_gpu:g} Gb/s assumed")
    nic_gbps = float(per_gpu) * per_node / nics if nics else float(per_gpu)
    data = {"fabric": kind, "nics_per_node": nics, "nic_gbps": nic_gbps,
            **_scale_out_extras(so, notes, f"{path}.scale_out")}
    scale_out = schema.load(ScaleOut, data, f"{path}.scale_out")
    return Cluster(gpu=gpu, num_gpus=int(n), gpus_per_node=per_node, scale_up=scale_up, scale_out=scale_out,
                   name=str(c.get("system") or ""), host_cpu=_host_cpu(c, path))


def _host_cpu(c: Mapping[str, Any], path: str) -> Any:
    """The case's ``host_cpu``, checked against the known ones (None when unstated)."""
    cpu = c.get("host_cpu")
    if cpu is not None and cpu not in get_args(HostCpu):
        raise SpecError(f"{path}.host_cpu", f"must be one of {', '.join(get_args(HostCpu))} (got {cpu!r})")
    return cpu
