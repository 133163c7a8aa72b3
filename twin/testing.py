"""Conformance kit for plugin authors: test a new fabric or strategy in a few lines.

    from twin.testing import assert_scale_out_fabric_conforms
    from my_pkg.fabric import MyFabric

    def test_my_fabric():
        assert_scale_out_fabric_conforms(MyFabric())

Each check builds real scenarios around the plugin (through a real Engine with the
built-in plugins plus yours) and asserts the properties every fabric or strategy must
have: valid tiers, more bandwidth never slower, unknown parameters rejected with the
field named, a JSON-ready report, and a full evaluation that succeeds.

The batch-equals-one-by-one kit: :func:`assert_batch_matches_one_by_one` (scenarios evaluated
alone and as one batch give the same numbers, bit for bit, on the designed network or under
a failure) and :func:`assert_strategies_agree` (that, for every strategy an engine has
installed, plus: a failure never changes which strategies run).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from twin.api import ScaleOutFabric, ScaleUpFabric, Scenario, SpecError, Strategy
from twin.core.conditions import NOMINAL, Conditions, Impact
from twin.core.point_set import PointSet
from twin.core.results import estimate_columns
from twin.engine import Engine
from twin.hookimpl import hookimpl
from twin.plugins import make_plugin_manager


class _Provider:
    """Registers the objects under test as a plugin."""

    def __init__(self, fabrics: list[Any], strategies: list[Any]) -> None:
        self._fabrics, self._strategies = fabrics, strategies

    @hookimpl
    def twin_fabrics(self) -> list[Any]:
        return self._fabrics

    @hookimpl
    def twin_strategies(self) -> list[Any]:
        return self._strategies


def engine_with(*objects: Any, replace_builtin: str | None = None, plugins: Sequence[object] = ()) -> Engine:
    """A real engine with the built-ins (autoload off) plus ``objects`` (fabrics, strategies)
    registered, and ``plugins``: further plugin objects (hook implementations, e.g. a
    ``twin_collective_cost``).
    """
    fabrics = [o for o in objects if not isinstance(o, Strategy)]
    strategies = [o for o in objects if isinstance(o, Strategy)]
    block = (replace_builtin,) if replace_builtin else ()
    pm = make_plugin_manager(autoload=False, block=block, extra=[_Provider(fabrics, strategies), *plugins])
    return Engine(pm)


def _scenario(engine: Engine, scale_out: Mapping[str, Any], num_gpus: int = 1024) -> Scenario:
    return engine.scenario({
        "name": "conformance",
        "cluster": {"system": "DGX-H100", "num_gpus": num_gpus, "scale_out": dict(scale_out)},
        "model": "llama3.1-70b",
        "plan": {"tp": 8, "pp": 4, "vp": 5, "gbs": 1024, "mbs": 1},
    })


def assert_scale_out_fabric_conforms(fabric: ScaleOutFabric, params: Mapping[str, Any] | None = None) -> None:
    """Check a scale-out fabric model end to end; raises AssertionError on a violation."""
    assert isinstance(fabric, ScaleOutFabric), "must subclass twin.api.ScaleOutFabric"
    assert fabric.kind and fabric.role == "scale_out", "needs a kind and the scale_out role"
    engine = engine_with(fabric)
    spec = {"fabric": fabric.kind, "params": dict(params or {})}
    scn = _scenario(engine, spec)
    tiers = engine.hierarchy(scn).tiers
    assert tiers[0].fabric != fabric.kind, "tier 0 belongs to the scale-up fabric"
    outer = tiers[1:]
    assert outer, "a scale-out fabric must build at least one tier"
    spans = [t.span_gpus for t in outer]
    assert spans == sorted(spans), f"tier spans must not shrink outwards: {spans}"
    assert spans[-1] >= scn.cluster.num_gpus, "the top tier must reach every GPU"
    for t in outer:
        assert t.bw_Bps > 0 and math.isfinite(t.bw_Bps), f"tier {t.name}: bandwidth must be positive"
        assert t.oversubscription >= 1.0, f"tier {t.name}: oversubscription must be >= 1"
        assert t.latency_s >= 0, f"tier {t.name}: latency must be >= 0"
    slow = engine.evaluate(scn)
    fast_scn = _scenario(engine, {**spec, "nic_gbps": scn.cluster.scale_out.nic_gbps * 4})  # type: ignore[union-attr]
    fast = engine.evaluate(fast_scn)
    assert fast.step_time_s <= slow.step_time_s * (1 + 1e-9), "more NIC bandwidth must never slow a step"
    json.dumps(fabric.report(scn.cluster, engine.hierarchy(scn)))
    try:
        _scenario(engine, {"fabric": fabric.kind, "params": {"no_such_parameter_xyz": 1}})
    except SpecError as err:
        assert "no_such_parameter_xyz" in err.field, f"unknown parameter error must name it (got {err.field!r})"
    else:
        raise AssertionError("an unknown fabric parameter must be rejected with a SpecError")


def assert_scale_up_fabric_conforms(fabric: ScaleUpFabric, cluster: Mapping[str, Any] | None = None,
                                    replace_builtin: str | None = None, plan: Mapping[str, Any] | None = None,
                                    plugins: Sequence[object] = ()) -> None:
    """Check a scale-up fabric model end to end; raises AssertionError on a violation.

    ``cluster``: the scenario's cluster mapping (default: a DGX-H100 of 64 GPUs with its NVLink
    settings cleared and ``fabric`` as the scale-up, domains of 8); its ``scale_up`` names the
    fabric. ``replace_builtin``: the plugin registering the same kind, blocked for the test (a
    built-in fabric checks itself so; ``plugins``: further plugin objects, e.g. one giving back
    the blocked plugin's presets). ``plan``: the plan (default: tp 8). Checked: tier 0 has a
    span and a positive, finite bandwidth; the step evaluates; the report is JSON-ready; four
    times the link bandwidth (``scale_up.link_GBps``) never slows the step; an unknown
    ``scale_up.params`` key is rejected with a SpecError naming it.
    """
    assert isinstance(fabric, ScaleUpFabric), "must subclass twin.api.ScaleUpFabric"
    assert fabric.kind and fabric.role == "scale_up", "needs a kind and the scale_up role"
    engine = engine_with(fabric, replace_builtin=replace_builtin, plugins=plugins)
    # The preset's NVLink-specific settings (NVLink generation 4, NVLS) are cleared: they
    # mean nothing to another scale-up fabric, which may rightly reject them.
    base = dict(cluster) if cluster is not None else {
        "system": "DGX-H100", "num_gpus": 64,
        "scale_up": {"fabric": fabric.kind, "domain_gpus": 8, "generation": None, "nvls": None}}
    base_up = dict(base.get("scale_up") or {})
    assert base_up.get("fabric") == fabric.kind, "the cluster's scale_up must name the fabric under test"

    def scenario(**up: Any) -> Scenario:
        return engine.scenario({"cluster": {**base, "scale_up": {**base_up, **up}}, "model": "llama3.1-8b",
                                "plan": dict(plan or {"tp": 8, "gbs": 64})})

    scn = scenario()
    hierarchy = engine.hierarchy(scn)
    tier = hierarchy.tiers[0]
    assert tier.fabric == fabric.kind, "tier 0 belongs to the scale-up fabric"
    assert tier.span_gpus >= 1 and tier.bw_Bps > 0 and math.isfinite(tier.bw_Bps), \
        "tier 0 needs a span and a positive, finite bandwidth"
    assert tier.latency_s >= 0, "tier 0's latency must be >= 0"
    est = engine.evaluate(scn)
    assert est.step_time_s > 0 and math.isfinite(est.step_time_s)
    json.dumps(fabric.report(scn.cluster, hierarchy))
    link = tier.bw_Bps / 1e9 / (scn.cluster.scale_up.achievable_fraction or 1.0)
    try:
        fast = engine.evaluate(scenario(link_GBps=link * 4))
    except SpecError as err:  # a fabric whose link rates are fixed refuses the field, naming it
        assert "link_GBps" in err.field, f"refusing link_GBps must name it (got {err.field!r})"
    else:
        assert fast.step_time_s <= est.step_time_s * (1 + 1e-9), "more link bandwidth must never slow a step"
    try:
        scenario(params={**base_up.get("params", {}), "no_such_parameter_xyz": 1})
    except SpecError as err:
        assert "no_such_parameter_xyz" in err.field, f"unknown parameter error must name it (got {err.field!r})"
    else:
        raise AssertionError("an unknown scale-up parameter must be rejected with a SpecError")


def assert_strategy_conforms(strategy: Strategy, scenario: Mapping[str, Any],
                             config: Mapping[str, Any] | None = None) -> None:
    """Check a strategy: it runs in ``scenario``, selected for its dimension
    (``strategies: {DIMENSION: {name, config}}``, ``config`` its configuration block), its
    exposed time is finite and non-negative and reported under its dimension, the step
    time stays the sum of its breakdown, and a batch of variations of ``scenario`` (global
    batch, micro-batch, recomputation) evaluated at once (``Engine.evaluate_points``)
    gives what each evaluated alone gives: the batch path and the one-scenario path agree.
    """
    assert isinstance(strategy, Strategy), "must subclass twin.api.Strategy"
    assert strategy.name and strategy.phase in ("microbatch", "pipeline", "step")
    assert strategy.dimension, "needs a dimension: the breakdown entry its exposed time is reported under"
    engine = engine_with(strategy)
    choice = {"name": strategy.name, "config": dict(config or {})}
    scn = engine.scenario({**scenario, "strategies": {**scenario.get("strategies", {}), strategy.dimension: choice}})
    ran = engine.strategy_set(scn.strategies)
    assert any(s.name == strategy.name for s in ran), "selected, the strategy must be among those that run"
    est = engine.evaluate(scn)
    assert math.isfinite(est.step_time_s) and est.step_time_s > 0
    assert abs(est.breakdown.total_s - est.step_time_s) <= 1e-9 * est.step_time_s, "breakdown must add up"
    for key, value in est.breakdown.exposed_comm_s.items():
        assert value >= 0, f"exposed {key} communication must be >= 0"
    if strategy.dimension != "offload":
        assert strategy.dimension in est.breakdown.exposed_comm_s, \
            f"the strategy takes no part in the scenario (no {strategy.dimension!r} in the breakdown)"
    plan = scn.plan
    variants = [scn]
    for kw in ({"gbs": plan.gbs * 2}, {"recompute": "full" if plan.recompute != "full" else "none"},
               {"mbs": plan.mbs * 2, "gbs": plan.gbs * 2}):
        variants.append(dataclasses.replace(scn, plan=dataclasses.replace(plan, **kw)))
    res = engine.evaluate_points(PointSet.from_scenarios(variants))
    for i, v in enumerate(variants):
        try:
            one = engine.evaluate(v, report=False)
        except SpecError:
            assert not res.feasible[i], f"variant {i}: the batch evaluated a scenario that breaks a rule"
            continue
        if not one.fits:
            continue
        assert res.feasible[i], f"variant {i}: the batch says {res.reason(i)!r}, alone it evaluates"
        got = float(res.columns["step_time_s"][i])
        assert math.isclose(got, one.step_time_s, rel_tol=1e-12), \
            f"variant {i}: step time {got!r} in a batch, {one.step_time_s!r} alone"


# Scenarios the kit runs every installed strategy in: each built-in strategy takes part in at
# least one (tensor, pipeline, data, FSDP, context, expert parallelism, offload to a memory pool).
KIT_SCENARIOS: tuple[Mapping[str, Any], ...] = (
    {"name": "kit-dense", "cluster": {"system": "DGX-H100", "num_gpus": 256}, "model": "llama3.1-8b",
     "plan": {"tp": 2, "pp": 2, "vp": 2, "cp": 2, "gbs": 256, "mbs": 1}},
    {"name": "kit-fsdp", "cluster": {"system": "DGX-H100", "num_gpus": 128}, "model": "llama3.1-8b",
     "plan": {"tp": 2, "gbs": 256, "optimizer_sharding": "fsdp"}},
    {"name": "kit-moe", "cluster": {"system": "DGX-H100", "num_gpus": 256}, "model": "mixtral-8x7b",
     "plan": {"tp": 2, "pp": 2, "ep": 8, "gbs": 256, "mbs": 1}},
    {"name": "kit-offload", "cluster": {"system": "DGX-H100", "num_gpus": 64,
                                        "memory_pool": {"capacity_gib_per_node": 2048, "bandwidth_GBps_per_node": 256}},
     "model": "llama3.1-8b", "plan": {"tp": 2, "gbs": 128, "offload": {"optimizer": "cxl"}}},
)
# The failure the kit runs both paths under: every scale-out tier at half its bandwidth, which is
# exactly the scenario with half the scale-out bandwidth (``calibration.scale_out_bandwidth``).
HALF_SCALE_OUT = 0.5


def _variants(scn: Scenario) -> list[Scenario]:
    """``scn`` and variations a batch mixes: global batch, micro-batch, recomputation."""
    plan = scn.plan
    out = [scn]
    for kw in ({"gbs": plan.gbs * 2}, {"recompute": "full" if plan.recompute != "full" else "none"},
               {"mbs": plan.mbs * 2, "gbs": plan.gbs * 2}):
        out.append(dataclasses.replace(scn, plan=dataclasses.replace(plan, **kw)))
    return out


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def assert_batch_matches_one_by_one(engine: Engine, scenarios: Sequence[Scenario],
                                    conditions: Conditions = NOMINAL) -> None:
    """Every scenario evaluated alone and all of them as one batch (``Engine.evaluate_many``),
    both under ``conditions``, give the same numbers: every column of a scenario's row equals
    its one-by-one estimate's (``twin.core.results.estimate_columns``), bit for bit; a dimension
    the scenario's strategies do not report is 0 in the batch; a scenario that breaks a rule
    alone is refused by the batch with the same message.
    """
    res = engine.evaluate_many(list(scenarios), require_fit=False, conditions=conditions)
    for i, scn in enumerate(scenarios):
        try:
            one = engine.evaluate(scn, report=False, conditions=conditions)
        except SpecError as err:
            refusal = res.refusal(i)
            assert refusal is not None, f"scenario {i}: the batch evaluated a scenario that breaks a rule ({err})"
            continue
        assert res.reason(i) is None, f"scenario {i}: the batch says {res.reason(i)!r}, alone it evaluates"
        expected = estimate_columns(one)
        for name, value in expected.items():
            got = res.value(name, i)
            assert _same(got, value), f"scenario {i}: {name} is {got!r} in a batch, {value!r} alone"
        for name in res.names():
            if name.startswith(("exposed_", "issued_")) and name not in expected:
                assert res.value(name, i) == 0.0, f"scenario {i}: {name} {res.value(name, i)!r}: not its dimension"
        assert int(res.microbatches[i]) == one.microbatches and int(res.dp[i]) == one.dp
        assert bool(res.fits[i]) == one.fits, f"scenario {i}: the batch and one scenario disagree on the fit"


def _halved_scale_out(engine: Engine, scn: Scenario) -> tuple[Conditions, Scenario]:
    """(the failure of every scale-out tier at half bandwidth, the scenario with half the scale-out
    bandwidth instead): the same network, stated as a failure and as a calibration.
    """
    tiers = len(engine.hierarchy(scn).tiers)
    impact = Impact(tier_bw=tuple((t, HALF_SCALE_OUT) for t in range(1, tiers)), note="every scale-out tier at half")
    cal = dataclasses.replace(scn.calibration,
                              scale_out_bandwidth=scn.calibration.scale_out_bandwidth * HALF_SCALE_OUT)
    return Conditions(impact=impact), dataclasses.replace(scn, calibration=cal)


def assert_strategies_agree(engine: Engine, scenarios: Sequence[Mapping[str, Any]] = KIT_SCENARIOS) -> None:
    """The batch-equals-one-by-one kit over every strategy ``engine`` has installed.

    Each strategy runs in the ``scenarios`` (mappings) where it takes part, selected for its
    dimension when it is an alternative (``strategies: {DIMENSION: NAME}``); a strategy that
    takes part in none of them fails the kit. In each, variations of the scenario
    (:func:`_variants`) are evaluated one by one and as one batch
    (:func:`assert_batch_matches_one_by_one`), on the network as designed and under a failure
    (every scale-out tier at half its bandwidth). The failure must cost what the same network
    stated as a calibration costs, one scenario at a time: a failure changes the network,
    never which strategies run.
    """
    strategies = engine.components().get("strategy", [])
    assert strategies, "the engine has no strategies"
    for row in strategies:
        name, dim, alternative = row["kind"], row["dimension"], bool(row["alternative"])
        ran_in = 0
        for base in scenarios:
            data = dict(base)
            if alternative:
                data["strategies"] = {**dict(base.get("strategies", {})), dim: name}
            try:
                scn = engine.scenario(data)
            except SpecError:
                continue
            if not _takes_part(engine, scn, name, dim):
                continue
            ran_in += 1
            variants = _variants(scn)
            assert_batch_matches_one_by_one(engine, variants)
            failure, by_hand = _halved_scale_out(engine, scn)
            assert_batch_matches_one_by_one(engine, variants, failure)
            degraded = engine.evaluate(scn, report=False, conditions=failure).step_time_s
            stated = engine.evaluate(by_hand, report=False).step_time_s
            assert degraded == stated, (f"strategy {name!r} in {scn.name!r}: the failure costs {degraded!r} s, "
                                        f"the same network stated as a calibration {stated!r} s")
        assert ran_in, f"strategy {name!r} ({dim}) takes part in none of the kit's scenarios"


def _takes_part(engine: Engine, scn: Scenario, name: str, dim: str) -> bool:
    """Whether strategy ``name`` runs in ``scn`` and reports its dimension there."""
    if not any(s.name == name for s in engine.strategy_set(scn.strategies)):
        return False
    est = engine.evaluate(scn, report=False)
    return dim in est.comm_issued_s or dim in est.breakdown.exposed_comm_s
