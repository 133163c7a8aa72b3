"""The plan rule table: what one scenario may skip, and the walk over it.

A group's ``knobs`` let one scenario skip the group when it keeps them at their defaults
(``plan_rules``): that is only right if, at those defaults, none of the group's rules can
be broken, whatever the rest of the plan, the model and the cluster. Checked here over
random plans (unvalidated: every rule is asked, broken or not) on dense, MoE and MLA models
and clusters with and without a CXL pool.
"""

from __future__ import annotations

import dataclasses
import random
from operator import attrgetter

import pytest

from twin.core.errors import SpecError
from twin.core.plan_rule_table import _GROUPS, PLAN_RULES, PlanFacts, plan_rules, validate_plan
from twin.core.specs import Offload, Plan, Scenario
from twin.engine import Engine

DEFAULTS = Plan(gbs=1)
CHOICES = {
    "tp": [1, 2, 3, 4, 8], "pp": [1, 2, 3, 4, 16], "vp": [1, 2, 3], "cp": [1, 2, 4], "ep": [1, 2, 8, 16],
    "etp": [None, 1, 2], "dp": [None, 1, 4, 8], "mbs": [1, 2], "gbs": [64, 96, 512],
    "schedule": ["auto", "1f1b", "interleaved", "zero_bubble_h1", "zero_bubble_v", "dualpipe", "dualpipev"],
    "pp_first_layers": [None, 1, 3], "pp_last_layers": [None, 2, 5], "recompute": ["none", "selective", "full"],
    "recompute_layers": [None, 1, 2],
    "recompute_modules": [("core_attn",), (), ("mlp",), ("moe", "moe_act"), ("mla_up_proj", "layernorm")],
    "precision": ["bf16", "fp8", "fp4", "fp16"], "recipe": ["auto", "delayed", "mxfp8", "nvfp4", "blockwise"],
    "bf16_layers_start": [0, 1, 1000], "bf16_layers_end": [0, 2], "sequence_parallel": [None, True, False],
    "optimizer_sharding": ["none", "distributed_optimizer", "fsdp"], "fsdp_reshard_after_forward": [True, False],
    "dp_shard": [0, 2, 3], "rank_order": ["tp-cp-ep-dp-pp", "tp-cp-pp-dp"], "trainable": ["full", "lora"],
    "lora_rank": [16, 8], "cp_comm_type": ["p2p", "all_gather", "a2a"],
    "offload": [Offload(), Offload(optimizer="cxl"), Offload(params="cxl", activations="host"),
                Offload(activations="cxl")],
}


@pytest.fixture(scope="module")
def bases() -> list[Scenario]:
    engine = Engine(autoload=False)
    out = []
    for model in ("llama3.1-8b", "mixtral-8x7b", "deepseek-v3"):
        for cluster in ({"system": "DGX-H100", "num_gpus": 64},
                        {"system": "DGX-B200", "num_gpus": 256, "memory_pool": {"capacity_gib_per_node": 512}}):
            out.append(engine.scenario({"cluster": cluster, "model": model, "plan": {"gbs": 256}}))
    return out


def random_plans(n: int, seed: int = 5) -> list[Plan]:
    rng = random.Random(seed)
    return [dataclasses.replace(DEFAULTS, **{k: rng.choice(v) for k, v in CHOICES.items()}) for _ in range(n)]


def at_defaults(plan: Plan, knobs: tuple[str, ...]) -> Plan:
    """``plan`` with ``knobs`` (dotted for a nested field) set back to their defaults."""
    for knob in knobs:
        outer, _, inner = knob.partition(".")
        if inner:
            nested = dataclasses.replace(getattr(plan, outer), **{inner: attrgetter(knob)(DEFAULTS)})
            plan = dataclasses.replace(plan, **{outer: nested})
        else:
            plan = dataclasses.replace(plan, **{outer: getattr(DEFAULTS, outer)})
    return plan


def test_a_group_s_knobs_at_their_defaults_break_none_of_its_rules(bases: list[Scenario]) -> None:
    knobbed = [g for g in PLAN_RULES if g.knobs]
    assert len(knobbed) > 10
    checked = 0
    for plan in random_plans(600):
        for base in bases:
            for group in knobbed:
                kept = at_defaults(plan, group.knobs)
                facts = PlanFacts(kept, base.model, base.cluster)
                if group.when is not None and not group.when(facts):
                    continue
                for rule in group.rules:
                    assert not rule.broken(facts), (group.knobs, rule.field, rule.template, kept)
                    checked += 1
    assert checked > 10_000


def test_the_walk_skips_a_group_only_where_its_knobs_are_at_their_defaults(bases: list[Scenario]) -> None:
    """One scenario: the rules the walk yields are exactly the broken rules of every group
    whose ``when`` holds, in table order (the knobs skip nothing that breaks).
    """
    for plan in random_plans(300, seed=9):
        for base in bases:
            facts = PlanFacts(plan, base.model, base.cluster)
            want = [(f"plan.{r.field}", r.template) for g in PLAN_RULES if g.when is None or g.when(facts)
                    for r in g.rules if r.broken(facts)]
            got = [(field, template) for field, _, template, _ in plan_rules(plan, base.model, base.cluster)]
            assert got == want
            if want:
                with pytest.raises(SpecError) as err:
                    validate_plan(plan, base.model, base.cluster)
                assert err.value.field == want[0][0]
            else:
                validate_plan(plan, base.model, base.cluster)


def test_every_group_is_walked() -> None:
    assert len(_GROUPS) == len(PLAN_RULES)
    for (knobs, defaults, when, rules), group in zip(_GROUPS, PLAN_RULES, strict=True):
        assert rules is group.rules and when is group.when
        assert (knobs is None) == (not group.knobs)
        if knobs is not None:
            assert knobs(DEFAULTS) == defaults
