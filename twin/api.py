"""The public API for plugin authors: everything a Fabric Twin plugin may import.

A plugin (built-in under ``plugins/`` or a third-party package) imports from this module
and nothing else of twin's, apart from the ``hookimpl`` marker (here too, or
``twin.hookimpl``). The hooks themselves are specified in ``twin/hookspecs.py``; the page
for plugin authors is ``docs/plugins.md``.

Stability promise: the names in ``__all__`` are the supported API; they keep their
meaning across minor versions, and a change to one is announced in the release notes.
Everything under ``twin.core`` (and any other ``twin`` module) is internal and may change
without notice; if a plugin needs something that is not here, the API is missing it: ask
for it to be added here rather than importing it from ``twin.core``.

Index (each group in the order of ``__all__``):

- Plugin marker: ``hookimpl`` decorates a plugin's hook implementations.
- Fabric models: ``Fabric`` and the four roles a fabric plugin fills, ``ScaleUpFabric``
  (tier 0: NVLink-like domains), ``ScaleOutFabric`` (tiers 1..: the network between
  domains), ``OpticsModel`` (transceivers of the scale-out links) and ``MemoryFabric``
  (a memory tier outside HBM, such as a CXL pool).
- The tier description fabrics build and collectives are costed on: ``Tier``,
  ``Hierarchy``, ``GroupSpan``.
- The specs a plugin reads: ``Scenario`` and its ``Cluster`` (``GPU``, ``ScaleUp``,
  ``ScaleOut``, ``Optics``, ``MemoryPool``), ``Model`` and ``Plan``.
- Errors: ``TwinError``, ``SpecError`` (bad input, naming the field), ``NotFoundError``,
  ``InfeasibleError``, ``PluginError``.
- Units: ``GIB``, ``US``, ``HOUR_S``, ``DAY_S``, ``gbps_to_bytes_per_s``,
  ``BYTES_PER_ELEMENT``.
- Scale-out fabric helpers: ``check_scale_out_params`` (reject unknown
  ``scale_out.params``), ``reject_scale_out_fields`` (reject ``scale_out`` fields a fabric
  does not model), ``read_param`` (one checked parameter), ``nic_efficiency`` /
  ``NIC_EFFICIENCY`` (achievable share of the NIC line rate), ``hop_latency_s`` (a hop's
  latency, ``scale_out.latency_us`` where stated), fat-tree sizing
  ``build_fat_tree``, ``tiers_needed``, ``FatTree``, ``FatTreeLevel``, ``LEVEL_NAMES``,
  tiers from a fat tree ``scale_out_tiers`` and its switch/link counts ``fat_tree_report``.
- Scale-up fabric helpers: ``check_scale_up_params`` and ``reject_scale_up_fields`` (the
  same rules for ``scale_up``), and tier 0 of a domain that is not a switch: ``mesh_tier``
  (fully connected: AMD xGMI, Gaudi's on-die RoCE) and ``torus_tier`` (TPU ICI, NeuronLink),
  whose groups get only the links joining their members (``twin.core.scale_up_shapes``).
- Failure scenarios: ``ComponentGroup``, ``FailureMode``, ``Impact``, ``UplinkLoss`` (what
  the ``twin_components`` / ``twin_failure_modes`` hooks return), ``ecmp_max_load``, the
  fat-tree inventory and its failures ``fat_tree_of``, ``fat_tree_components``,
  ``fat_tree_failure_modes``, ``nic_share_factor``, ``REROUTE_STALL_S``, and the published
  defaults ``network_rates``, ``DETECTION_CRASH_S``, ``REPAIR_H``, ``REPAIR_SOURCE``.
- Telemetry: ``MetricMapping`` and ``Condition`` (what ``twin_metric_mappings`` returns).
- Collective costing: ``CollectiveCost`` (what ``twin_collective_cost`` returns),
  ``collective_cost`` (the built-in NCCL-style model), ``bus_factor``, ``OPS``,
  ``ALGORITHMS``.
- Parallelism strategies: ``Strategy`` (the base class), ``Terms`` (what ``evaluate``
  returns: time and bytes per micro-batch and per step), ``EvalContext`` (what a strategy
  reads), ``StageTimes`` (the bottleneck stage's compute), ``Workload`` (the per-GPU work
  of one micro-batch), ``PlanColumns`` (a batch's plan: one array per ``Plan`` field),
  ``ops`` (``where``, ``maximum``, ``minimum``, ``logical_and``, ``any_`` ...: arithmetic
  that works on one scenario's numbers and on a batch's arrays alike), and the model
  facts strategies use: ``ACT_BYTES``, ``ADAM_STATE_BYTES``, ``lora_trainable_fraction``,
  ``weights_sharded``, ``recompute_module`` (whether selective recomputation names a
  module), ``dedup_dispatch_cost``, ``dispatch_fanout`` (distinct ranks and
  domains a token's expert dispatch reaches), ``resolved_schedule`` (the pipeline
  schedule one plan runs: ``plan.schedule`` with "auto" resolved by vp).
- Memory tiers outside HBM: ``MemoryTiers`` and ``TierPath`` (host DRAM and the CXL pool as
  one GPU reaches them: ``EvalContext.memory_tiers``), ``offload_terms`` (the built-in model of
  offload traffic: each kind on its tier, hidden as far as the schedule allows) and
  ``transfer_s`` (one transfer's time for its access pattern: a round trip per copy, reads
  bounded by the outstanding-request window).

The conformance kit is ``twin.testing`` (``assert_scale_out_fabric_conforms``,
``assert_scale_up_fabric_conforms``, ``assert_strategy_conforms``, ``engine_with``). It is
referenced here, not re-exported: it runs a real ``twin.engine.Engine``, and the engine
sits above the plugins, which sit above this module (layers: ``twin.core`` < ``twin.api``
< plugins < ``twin.engine``), so importing it here would be a cycle. Import it in tests.
"""

from __future__ import annotations

from twin.core import ops
from twin.core.collectives import ALGORITHMS, OPS, CollectiveCost, bus_factor, collective_cost, dedup_dispatch_cost
from twin.core.errors import InfeasibleError, NotFoundError, PluginError, SpecError, TwinError
from twin.core.fabric_params import (
    check_scale_out_params,
    check_scale_up_params,
    read_param,
    reject_scale_out_fields,
    reject_scale_up_fields,
)
from twin.core.failures.components import ComponentGroup, FailureMode, Impact, UplinkLoss, ecmp_max_load
from twin.core.failures.fabric import (
    REROUTE_STALL_S,
    fat_tree_components,
    fat_tree_failure_modes,
    fat_tree_of,
    nic_share_factor,
)
from twin.core.failures.failure_rates import DETECTION_CRASH_S, REPAIR_H, REPAIR_SOURCE, network_rates
from twin.core.fattree import (
    LEVEL_NAMES,
    FatTree,
    FatTreeLevel,
    build_fat_tree,
    fat_tree_report,
    scale_out_tiers,
    tiers_needed,
)
from twin.core.interfaces import (
    EvalContext,
    Fabric,
    MemoryFabric,
    OpticsModel,
    ScaleOutFabric,
    ScaleUpFabric,
    StageTimes,
    Strategy,
    Terms,
)
from twin.core.memory import ADAM_STATE_BYTES, lora_trainable_fraction, weights_sharded
from twin.core.moe_routing import dispatch_fanout
from twin.core.nic import NIC_EFFICIENCY, hop_latency_s, nic_efficiency
from twin.core.offload import MemoryTiers, TierPath, offload_terms, transfer_s
from twin.core.pipelines import resolved as resolved_schedule
from twin.core.point_set import PlanColumns
from twin.core.scale_up_tiers import mesh_tier, torus_tier
from twin.core.specs import GPU, Cluster, MemoryPool, Model, Optics, Plan, ScaleOut, ScaleUp, Scenario, recompute_module
from twin.core.telemetry_vocab import Condition, MetricMapping
from twin.core.topology import GroupSpan, Hierarchy, Tier
from twin.core.units import BYTES_PER_ELEMENT, DAY_S, GIB, HOUR_S, US, gbps_to_bytes_per_s
from twin.core.workload import ACT_BYTES, Workload
from twin.hookimpl import hookimpl

# Grouped as in the index above (not sorted) so the list reads as the API's table of contents.
__all__ = [  # noqa: RUF022
    # plugin marker
    "hookimpl",
    # fabric models
    "Fabric", "ScaleUpFabric", "ScaleOutFabric", "OpticsModel", "MemoryFabric",
    # tier description
    "Tier", "Hierarchy", "GroupSpan",
    # specs
    "Scenario", "Cluster", "GPU", "ScaleUp", "ScaleOut", "Optics", "MemoryPool", "Model", "Plan",
    # errors
    "TwinError", "SpecError", "NotFoundError", "InfeasibleError", "PluginError",
    # units
    "GIB", "US", "HOUR_S", "DAY_S", "gbps_to_bytes_per_s", "BYTES_PER_ELEMENT",
    # scale-out fabric helpers
    "check_scale_out_params", "reject_scale_out_fields", "read_param", "nic_efficiency", "NIC_EFFICIENCY",
    "hop_latency_s",
    # scale-up fabric helpers
    "check_scale_up_params", "reject_scale_up_fields", "mesh_tier", "torus_tier",
    "build_fat_tree", "tiers_needed", "FatTree", "FatTreeLevel", "LEVEL_NAMES", "scale_out_tiers", "fat_tree_report",
    # failure scenarios
    "ComponentGroup", "FailureMode", "Impact", "UplinkLoss", "ecmp_max_load", "fat_tree_of", "fat_tree_components",
    "fat_tree_failure_modes", "nic_share_factor", "REROUTE_STALL_S", "network_rates", "DETECTION_CRASH_S",
    "REPAIR_H", "REPAIR_SOURCE",
    # telemetry
    "MetricMapping", "Condition",
    # collective costing
    "CollectiveCost", "collective_cost", "bus_factor", "OPS", "ALGORITHMS",
    # parallelism strategies
    "Strategy", "Terms", "EvalContext", "StageTimes", "Workload", "PlanColumns", "ops", "ACT_BYTES",
    "ADAM_STATE_BYTES", "lora_trainable_fraction", "weights_sharded", "recompute_module", "dedup_dispatch_cost",
    "dispatch_fanout", "resolved_schedule",
    # memory tiers outside HBM
    "MemoryTiers", "TierPath", "offload_terms", "transfer_s",
]
