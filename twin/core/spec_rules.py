"""The cross-field rules of the cluster, the model, the software stack and the scenario:
what the strict loader (:mod:`twin.core.schema`) cannot check one field at a time. Each
raises a :class:`~twin.core.errors.SpecError` naming the field; the plan's rules are the
table of :mod:`twin.core.plan_rule_table`.
"""

from __future__ import annotations

from twin.core.cluster_specs import Cluster, ComputeEfficiency
from twin.core.errors import SpecError
from twin.core.plan_rule_table import validate_plan
from twin.core.training_specs import Model, Scenario, Software


def _divides(a: int, b: int) -> bool:
    return b % a == 0


def validate_model(model: Model, path: str = "model") -> None:
    """Rules spanning model fields."""
    if model.kv_head_count > model.heads:
        raise SpecError(f"{path}.kv_heads", f"must be <= heads ({model.heads}) (got {model.kv_head_count})")
    if not _divides(model.kv_head_count, model.heads):
        raise SpecError(f"{path}.kv_heads", f"must divide heads ({model.heads}) (got {model.kv_head_count})")
    if model.attention == "mla" and model.mla is None:
        raise SpecError(f"{path}.mla", "is required when attention is 'mla'")
    # An MLA block under another attention would be ignored (only attention: mla reads it).
    if model.mla is not None and model.attention != "mla":
        raise SpecError(f"{path}.mla", f"applies only with attention: mla (got attention {model.attention!r})")
    if model.packed_doc_tokens is not None and model.packed_doc_tokens > model.seq_len:
        raise SpecError(f"{path}.packed_doc_tokens",
                        f"must be <= seq_len ({model.seq_len}): a packed document fits in its sequence "
                        f"(got {model.packed_doc_tokens})")
    if model.moe is not None:
        moe = model.moe
        if moe.top_k > moe.experts:
            raise SpecError(f"{path}.moe.top_k", f"must be <= experts ({moe.experts}) (got {moe.top_k})")
        if moe.shared_expert_ffn is not None and moe.shared_experts == 0:
            raise SpecError(f"{path}.moe.shared_expert_ffn", "applies only with moe.shared_experts > 0")
        if moe.pad_to_capacity and moe.capacity_factor is None:
            raise SpecError(f"{path}.moe.pad_to_capacity",
                            "needs moe.capacity_factor (Megatron-Core pads expert inputs to a capacity)")
        if model.hybrid is None and moe.moe_layers is not None and moe.moe_layers + moe.dense_layers > model.layers:
            raise SpecError(f"{path}.moe.moe_layers",
                            f"moe_layers + dense_layers must be <= layers ({model.layers})")
        if model.hybrid is None and moe.moe_layers is None and moe.dense_layers > model.layers:
            raise SpecError(f"{path}.moe.dense_layers", f"must be <= layers ({model.layers})")
    if model.hybrid is not None:
        hy = model.hybrid
        bad = sorted(set(hy.pattern) - set("M*E-"))
        if bad:
            raise SpecError(f"{path}.hybrid.pattern", f"may only contain M, *, E, - (got {''.join(bad)!r})")
        if len(hy.pattern) != model.layers:
            raise SpecError(f"{path}.hybrid.pattern",
                            f"must have one symbol per layer ({model.layers}) (got {len(hy.pattern)})")
        if hy.count("E") and model.moe is None:
            raise SpecError(f"{path}.moe", "is required when the hybrid pattern has MoE layers (E)")
        for name, symbol in (("mamba_layers", "M"), ("attention_layers", "*"), ("moe_layers", "E")):
            stated = getattr(hy, name)
            if stated is not None and stated != hy.count(symbol):
                raise SpecError(f"{path}.hybrid.{name}",
                                f"must equal the count of {symbol!r} in pattern ({hy.count(symbol)}) (got {stated})")


def validate_cluster(cluster: Cluster, path: str = "cluster") -> None:
    """Rules spanning cluster fields."""
    n, per_node = cluster.num_gpus, cluster.gpus_per_node
    if n > per_node and n % per_node:
        raise SpecError(f"{path}.num_gpus", f"must be a multiple of gpus_per_node ({per_node}) (got {n})")
    dom = cluster.scale_up.domain_gpus
    if dom % per_node and per_node % dom:
        raise SpecError(f"{path}.scale_up.domain_gpus",
                        f"must divide or be a multiple of gpus_per_node ({per_node}) (got {dom})")
    if cluster.scale_out is not None:
        so = cluster.scale_out
        if so.tiers is not None and len(so.oversubscription) > max(0, so.tiers - 1):
            raise SpecError(f"{path}.scale_out.oversubscription",
                            f"has {len(so.oversubscription)} entries but a {so.tiers}-tier fabric has "
                            f"{max(0, so.tiers - 1)} uplink tiers")
        if so.tiers is not None and so.tier_spans and len(so.tier_spans) != so.tiers:
            raise SpecError(f"{path}.scale_out.tier_spans",
                            f"must have one entry per tier ({so.tiers}) (got {len(so.tier_spans)})")
        if any(b < a for a, b in zip(so.tier_spans, so.tier_spans[1:], strict=False)):
            raise SpecError(f"{path}.scale_out.tier_spans", "must not decrease from leaf to top")
    elif n > dom:
        raise SpecError(f"{path}.scale_out", f"is required when num_gpus ({n}) exceeds the scale-up domain ({dom})")
    validate_efficiency(cluster.gpu.efficiency, f"{path}.gpu.efficiency")
    validate_power(cluster, path)


def validate_power(cluster: Cluster, path: str = "cluster") -> None:
    """Rules of ``cluster.power`` and ``cluster.prices``: a figure must apply to something
    the cluster has, and the prices must name one way of paying for the hardware.
    """
    pw, pr = cluster.power, cluster.prices
    if cluster.gpu.tdp_w is None:  # not published: the GPUs' energy is not counted, so nothing applies to it
        stated = (("gpu_idle_w", pw.gpu_idle_w is not None), ("gpu_busy_fraction", pw.gpu_busy_fraction != 1.0))
        for name, given in stated:
            if given:
                raise SpecError(f"{path}.power.{name}", f"needs the GPU's board power, which is not published for "
                                                        f"{cluster.gpu.name or 'this GPU'}: state gpu.tdp_w")
        busy = 0.0
    else:
        busy = cluster.gpu.tdp_w * pw.gpu_busy_fraction
    if pw.gpu_idle_w is not None and pw.gpu_idle_w > busy:
        raise SpecError(f"{path}.power.gpu_idle_w",
                        f"must be <= the GPU's busy power (gpu.tdp_w x gpu_busy_fraction = {busy:g} W) "
                        f"(got {pw.gpu_idle_w:g})")
    if cluster.scale_out is None:
        if pw.nic_w is not None:
            raise SpecError(f"{path}.power.nic_w", "applies to scale-out NICs; the cluster has no scale_out")
        if pw.switch_w:
            raise SpecError(f"{path}.power.switch_w", "applies to scale-out switches; the cluster has no scale_out")
    if pw.cxl_device_w is not None and cluster.memory_pool is None:
        raise SpecError(f"{path}.power.cxl_device_w", "applies to CXL devices; the cluster has no memory_pool")
    if (pr.capex_usd_per_gpu is None) != (pr.amortisation_years is None):
        given, missing = ("capex_usd_per_gpu", "amortisation_years") if pr.amortisation_years is None else \
            ("amortisation_years", "capex_usd_per_gpu")
        raise SpecError(f"{path}.prices.{missing}", f"is required with prices.{given}")
    if pr.usd_per_gpu_hour is not None and pr.capex_usd_per_gpu is not None:
        raise SpecError(f"{path}.prices.capex_usd_per_gpu",
                        "cannot be combined with usd_per_gpu_hour: both price the hardware (give one)")


def validate_software(software: Software, path: str = "software") -> None:
    """Rules spanning software fields: a fused-attention kernel needs fused attention."""
    if software.attention_kernel != "profile" and not software.flash_attention:
        raise SpecError(f"{path}.attention_kernel",
                        f"{software.attention_kernel!r} is a fused-attention kernel, but the stack runs unfused "
                        "attention (flash_attention false)")


def validate_efficiency(eff: ComputeEfficiency | None, path: str = "cluster.gpu.efficiency") -> None:
    """Rules spanning efficiency fields: cuDNN attention figures come as a pair."""
    if eff is not None and (eff.cudnn_attention_fwd is None) != (eff.cudnn_attention_bwd is None):
        missing = "cudnn_attention_bwd" if eff.cudnn_attention_bwd is None else "cudnn_attention_fwd"
        raise SpecError(f"{path}.{missing}", "is required with its pair: cuDNN attention figures are given "
                        "forward and backward together")


def validate_scenario(scenario: Scenario) -> None:
    """Every cross-field rule of a scenario."""
    validate_software(scenario.software)
    validate_cluster(scenario.cluster)
    validate_model(scenario.model)
    validate_plan(scenario.plan, scenario.model, scenario.cluster)
