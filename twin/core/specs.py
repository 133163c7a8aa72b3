"""The domain model: cluster, model, plan and scenario specs, and their cross-field rules,
in one namespace.

Specs are frozen dataclasses, loaded strictly by :mod:`twin.core.schema` (unknown keys,
wrong types and out-of-range numbers are errors naming the field) and then checked by
``validate_*`` for rules that span fields (``tp*pp*cp*dp == num_gpus`` ...).
Units are in the field names (see :mod:`twin.core.units`). Where each part lives:

- :mod:`twin.core.cluster_specs`: the cluster (GPU, efficiencies, fabrics, optics, CXL
  pool, power, prices);
- :mod:`twin.core.training_specs`: the model, the plan, the calibration, the software
  stack, the strategy selection and the :class:`Scenario`;
- :mod:`twin.core.spec_rules`: the cross-field rules of the cluster, the model, the
  software stack and the scenario;
- :mod:`twin.core.plan_rule_table`: the plan's rules, a table shared by one scenario
  (:func:`validate_plan`) and a batch (:func:`plan_rules`).
"""

from __future__ import annotations

from twin.core.cluster_specs import (
    _GENERATION_ORDER,
    GPU,
    MAX_GPUS,
    PRECISION_MIN_GENERATION,
    YEAR_S,
    Cluster,
    ComputeEfficiency,
    Generation,
    HostCpu,
    MemoryPool,
    Optics,
    Power,
    Precision,
    Prices,
    ScaleOut,
    ScaleUp,
)
from twin.core.plan_rule_table import (
    ONE_CHUNK_SCHEDULES,
    PLAN_RULES,
    V_SCHEDULES,
    PlanFacts,
    PlanRule,
    Rule,
    RuleCheck,
    RuleGroup,
    _categories,
    gpu_supports,
    has_dense_mlp,
    plan_rules,
    validate_plan,
)
from twin.core.spec_rules import (
    validate_cluster,
    validate_efficiency,
    validate_model,
    validate_power,
    validate_scenario,
    validate_software,
)
from twin.core.training_specs import (
    DEFAULT_LORA_RANK,
    DEFAULT_RECOMPUTE_MODULES,
    DEFAULT_SOFTWARE,
    DEFAULT_STRATEGIES,
    FP8_RECIPES,
    MLA,
    AttentionKernel,
    Calibration,
    Hybrid,
    Model,
    MoE,
    Offload,
    OffloadTarget,
    Overlap,
    Plan,
    Recipe,
    Recompute,
    RecomputeModule,
    Scenario,
    Schedule,
    Sharding,
    SlidingWindow,
    Software,
    Strategies,
    StrategyChoice,
    SubLayerKind,
    default_recompute_modules,
    names_module,
    recompute_module,
)

__all__ = [
    "DEFAULT_LORA_RANK", "DEFAULT_RECOMPUTE_MODULES", "DEFAULT_SOFTWARE", "DEFAULT_STRATEGIES", "FP8_RECIPES",
    "GPU", "MAX_GPUS", "MLA", "ONE_CHUNK_SCHEDULES", "PLAN_RULES", "PRECISION_MIN_GENERATION", "V_SCHEDULES",
    "YEAR_S", "_GENERATION_ORDER", "AttentionKernel", "Calibration", "Cluster", "ComputeEfficiency", "Generation",
    "HostCpu", "Hybrid", "MemoryPool", "MoE", "Model", "Offload", "OffloadTarget", "Optics", "Overlap", "Plan",
    "PlanFacts", "PlanRule", "Power", "Precision", "Prices", "Recipe", "Recompute", "RecomputeModule", "Rule",
    "RuleCheck", "RuleGroup", "ScaleOut", "ScaleUp", "Scenario", "Schedule", "Sharding", "SlidingWindow",
    "Software", "Strategies", "StrategyChoice", "SubLayerKind", "_categories", "default_recompute_modules",
    "gpu_supports", "has_dense_mlp", "names_module", "plan_rules", "recompute_module", "validate_cluster",
    "validate_efficiency", "validate_model", "validate_plan", "validate_power", "validate_scenario",
    "validate_software",
]
