"""Mapping -> Scenario through the caches: shared objects, read-only specs, bounded caches,
and results and errors exactly those without caches. (The loader itself: test_schema_loader.py.)"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import pickle
import sys
import threading

import pytest

from tests.conftest import ROOT, base_scenario
from twin.core import schema
from twin.core.errors import SpecError, TwinError
from twin.core.scenario_io import resolve_cluster, resolve_gpu, resolve_model, scenario_from_dict
from twin.core.schema import FrozenDict, FrozenList, Unkeyable, load, value_key
from twin.core.specs import Overlap, Plan, Scenario
from twin.engine import Engine

sys.path.insert(0, str(ROOT / "validation"))
from equivalence import points

ROCE = {"system": "Meta-RoCE-H100", "num_gpus": 1024,
        "scale_out": {"params": {"congestion_control": "dcqcn", "ecmp_flows_per_pair": 4}}}


@pytest.fixture
def fresh() -> Engine:
    """An engine of its own: its catalog caches start empty."""
    return Engine(autoload=False)


def outcome(engine: Engine, mapping: object) -> tuple:
    """What Engine.scenario gives: the plain form and its repr, or the error's class, field, text."""
    try:
        plain = schema.dump(engine.scenario(mapping))  # type: ignore[arg-type]
        return ("ok", plain, repr(plain))
    except TwinError as err:
        return ("error", type(err).__name__, getattr(err, "field", None), str(err))


# ------------------------------------------------------------------ interning
def test_equal_sections_give_the_same_objects(fresh: Engine) -> None:
    data = base_scenario(overlap={"grad_reduce": False}, offload={"optimizer": "host"})
    data["calibration"] = {"compute_efficiency": 0.9}
    a = fresh.scenario(data)
    b = fresh.scenario(copy.deepcopy(data))
    assert a == b
    for part in ("cluster", "model", "plan", "calibration"):
        assert getattr(a, part) is getattr(b, part), part
    assert a.plan.overlap is b.plan.overlap and a.plan.offload is b.plan.offload
    assert a.cluster.gpu is b.cluster.gpu


def test_equal_scenario_mappings_give_the_same_scenario(fresh: Engine) -> None:
    data = base_scenario(overlap={"grad_reduce": False})
    a = fresh.scenario(data)
    assert fresh.scenario(copy.deepcopy(data)) is a
    renamed = fresh.scenario({**data, "name": "other"})
    assert renamed is not a and renamed.name == "other" and renamed.plan is a.plan
    # a scenario kept unvalidated still fails the rules when a caller asks for them
    broken = {**data, "plan": {**data["plan"], "gbs": 100}}  # 100 is not a multiple of dp x mbs
    assert scenario_from_dict(broken, fresh.catalog, validate=False) is \
        scenario_from_dict(copy.deepcopy(broken), fresh.catalog, validate=False)
    with pytest.raises(SpecError, match="gbs"):
        scenario_from_dict(broken, fresh.catalog)


def test_different_sections_give_different_objects(fresh: Engine) -> None:
    a = fresh.scenario(base_scenario())
    b = fresh.scenario(base_scenario(gbs=512))
    assert a.plan is not b.plan and a.plan != b.plan
    assert a.cluster is b.cluster and a.model is b.model
    c = fresh.scenario({**base_scenario(), "model": {"preset": "llama3.1-70b", "seq_len": 4096}})
    assert c.model is not a.model and c.model.seq_len == 4096
    d = fresh.scenario({**base_scenario(), "cluster": {"system": "DGX-H100", "num_gpus": 256}})
    assert d.cluster is not a.cluster
    assert d.cluster.gpu is a.cluster.gpu  # the same GPU preset, whatever the cluster size


def test_values_equal_in_python_but_different_inputs_are_told_apart() -> None:
    # True == 1 == 1.0 and -0.0 == 0.0 in Python; as inputs they differ.
    keys = [value_key(v) for v in (1, True, 1.0, 0.0, -0.0, [1], (1,), "1", None)]
    assert len(set(keys)) == len(keys)
    assert value_key({"a": 1, "b": [1, 2.5]}) == value_key({"a": 1, "b": [1, 2.5]})
    assert value_key({"a": 1, "b": 2}) != value_key({"b": 2, "a": 1})  # order shows (first bad parameter)
    for unkeyable in (math.nan, {1: "a"}, Plan(gbs=8), {"x": {1, 2}}):
        with pytest.raises(Unkeyable):
            value_key(unkeyable)
    # a cached valid input never answers for an equal-in-Python invalid one
    load(Plan, {"gbs": 64, "sequence_parallel": True}, "plan")
    with pytest.raises(SpecError, match="boolean"):
        load(Plan, {"gbs": 64, "sequence_parallel": 1}, "plan")
    catalog = Engine(autoload=False).catalog
    resolve_cluster({"system": "DGX-H100", "num_gpus": 8, "scale_out": {"sharp": True}}, catalog)
    with pytest.raises(SpecError, match="boolean"):
        resolve_cluster({"system": "DGX-H100", "num_gpus": 8, "scale_out": {"sharp": 1}}, catalog)


# ------------------------------------------------------------------ no mutation
def test_the_input_mapping_is_never_changed(fresh: Engine) -> None:
    for data in (base_scenario(overlap={"p2p": False}), {**base_scenario(), "cluster": ROCE,
                                                          "model": {"preset": "llama3.1-70b", "seq_len": 2048}}):
        before = copy.deepcopy(data)
        fresh.scenario(data)
        fresh.scenario(data)
        assert data == before


def test_returned_specs_are_read_only_all_the_way_down(fresh: Engine) -> None:
    scn = fresh.scenario({**base_scenario(), "cluster": ROCE})
    gpu, params = scn.cluster.gpu, scn.cluster.scale_out.params
    assert isinstance(gpu.peak_tflops, FrozenDict) and isinstance(params, FrozenDict)
    before = dict(params)
    assert before == {"ecmp_flows_per_pair": 4, "congestion_control": "dcqcn"}  # the overrides, merged
    with pytest.raises(dataclasses.FrozenInstanceError):
        scn.plan.tp = 2  # type: ignore[misc]
    for mutate in (lambda: gpu.peak_tflops.__setitem__("bf16", 1.0), lambda: gpu.peak_tflops.update(bf16=1.0),
                   lambda: gpu.peak_tflops.pop("bf16"), gpu.peak_tflops.clear,
                   lambda: gpu.peak_tflops.setdefault("x", 1.0), gpu.peak_tflops.popitem,
                   lambda: params.__delitem__("congestion_control"),
                   lambda: params.__ior__({"x": 1})):
        with pytest.raises(TypeError, match="read-only"):
            mutate()
    params.__init__({"x": 1})  # a second __init__ (which refills a plain dict) changes nothing
    assert params == before
    again = fresh.scenario({**base_scenario(), "cluster": ROCE})
    assert again.cluster is scn.cluster and again.cluster.gpu.peak_tflops == Engine(
        autoload=False).scenario(base_scenario()).cluster.gpu.peak_tflops


def test_lists_inside_free_form_parameters_are_frozen_copies(fresh: Engine) -> None:
    spec = load(Overlap, {}, "x")  # no mapping fields: frozen dataclass only
    assert spec == Overlap()
    values = [1, {"k": [2]}]
    frozen = schema.freeze({"a": values, "t": (3, [4])})
    assert frozen == {"a": [1, {"k": [2]}], "t": (3, [4])} and repr(frozen) == repr(
        {"a": [1, {"k": [2]}], "t": (3, [4])})
    assert isinstance(frozen["a"], FrozenList) and isinstance(frozen["a"][1], FrozenDict)
    assert isinstance(frozen["t"][1], FrozenList)
    values.append(99)  # the caller's list changes; the frozen copy does not
    assert frozen["a"] == [1, {"k": [2]}]
    for mutate in (lambda: frozen["a"].append(3), lambda: frozen["a"].__setitem__(0, 5), frozen["a"].sort,
                   lambda: frozen["a"].__iadd__([1]),
                   lambda: frozen["a"][1].update(k=1)):
        with pytest.raises(TypeError, match="read-only"):
            mutate()
    frozen["a"].__init__([7])
    assert frozen["a"] == [1, {"k": [2]}]


def test_changing_the_input_after_parsing_does_not_reach_the_cache(fresh: Engine) -> None:
    data = {**base_scenario(), "cluster": copy.deepcopy(ROCE)}
    first = fresh.scenario(data)
    data["cluster"]["scale_out"]["params"]["ecmp_flows_per_pair"] = 8
    assert first.cluster.scale_out.params["ecmp_flows_per_pair"] == 4
    second = fresh.scenario(data)
    assert second.cluster is not first.cluster
    assert second.cluster.scale_out.params["ecmp_flows_per_pair"] == 8


def test_frozen_specs_copy_pickle_serialise_and_replace_like_plain_ones(fresh: Engine) -> None:
    scn = fresh.scenario({**base_scenario(), "cluster": ROCE})
    for clone in (pickle.loads(pickle.dumps(scn)), copy.deepcopy(scn), copy.copy(scn)):
        assert clone == scn
        assert isinstance(clone.cluster.scale_out.params, FrozenDict)
    plain = schema.dump(scn)
    assert type(plain["cluster"]["gpu"]["peak_tflops"]) is dict
    assert json.loads(json.dumps(plain)) == plain
    assert json.loads(json.dumps(scn.cluster.gpu.peak_tflops)) == dict(scn.cluster.gpu.peak_tflops)
    faster = dataclasses.replace(scn.cluster.gpu, peak_tflops={**scn.cluster.gpu.peak_tflops, "bf16": 2000.0})
    assert faster.peak_tflops["bf16"] == 2000.0
    assert scn.cluster.gpu.peak_tflops["bf16"] != 2000.0


# ------------------------------------------------------------------ bounded
def test_caches_are_bounded(fresh: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    plans = schema._loader_for(Plan).interner
    assert plans is not None
    monkeypatch.setattr(plans, "maxsize", 16)
    monkeypatch.setattr(fresh.catalog.caches["cluster"], "maxsize", 4)
    for i in range(50):
        load(Plan, {"gbs": 8 * (i + 1)}, "plan")
        resolve_cluster({"system": "DGX-H100", "num_gpus": 8 * (i + 1)}, fresh.catalog)
    assert len(plans) == 16
    assert len(fresh.catalog.caches["cluster"]) == 4
    # first in, first out: the newest are kept
    assert load(Plan, {"gbs": 400}, "plan") is load(Plan, {"gbs": 400}, "plan")
    # every default size is finite
    sizes = [plans.maxsize] + [c.maxsize for c in fresh.catalog.caches.values()]
    assert all(0 < s < 10**5 for s in sizes)


def test_adding_presets_clears_the_catalog_caches(fresh: Engine) -> None:
    fresh.scenario(base_scenario())
    assert len(fresh.catalog.caches["cluster"]) == 1
    fresh.catalog.add("models", {"tiny-test": {"layers": 2, "hidden": 64, "heads": 4, "vocab": 100,
                                               "seq_len": 128}}, "test")
    assert all(len(c) == 0 for c in fresh.catalog.caches.values())


# ------------------------------------------------------------------ errors
BAD = [
    base_scenario(tp=0), base_scenario(tp=True), base_scenario(tp=3), base_scenario(gbs=100),
    base_scenario(tp="8"), base_scenario(bogus=1), base_scenario(overlap={"p2p": 1}),
    {**base_scenario(), "cluster": {"system": "DGX-H100", "num_gpus": 100}},
    {**base_scenario(), "cluster": {"system": "DGX-H100", "num_gpus": 128, "scale_out": {"fabric": "pigeon"}}},
    {**base_scenario(), "cluster": {"system": "DGX-H100", "num_gpus": 128.5, "scale_out": {"nic_gbps": -1}}},
    {**base_scenario(), "model": {"preset": "llama3.1-70b", "kv_heads": 7}},
    {**base_scenario(), "model": "gpt-99"}, {**base_scenario(), "calibration": {"compute_efficiency": 9}},
    {**base_scenario(), "name": 5},
]


@pytest.mark.parametrize("data", BAD, ids=range(len(BAD)))
def test_errors_are_the_same_every_time_and_as_without_caches(fresh: Engine, data: dict) -> None:
    # warm every cache with the valid neighbours first
    fresh.scenario(base_scenario())
    first, second = outcome(fresh, data), outcome(fresh, data)
    assert first[0] == "error" and first == second
    try:
        schema.set_interning(False)
        assert outcome(Engine(autoload=False), data) == first
    finally:
        schema.set_interning(True)


def test_random_points_through_the_caches_match_the_uncached_path() -> None:
    """The caches and the validation shortcut change nothing: per point, the same scenario
    (by == and by repr) or the same error, cold, warm, and with every cache off."""
    pts = points(1500)
    engine = Engine(autoload=False)
    cold = [outcome(engine, p) for p in pts]
    warm = [outcome(engine, p) for p in pts]
    try:
        schema.set_interning(False)  # nothing is kept: every call takes the full path
        plain = Engine(autoload=False)
        reference = [outcome(plain, p) for p in pts]
    finally:
        schema.set_interning(True)
    assert cold == reference
    assert warm == reference
    assert 0.3 < sum(r[0] == "ok" for r in reference) / len(pts) < 0.9


def test_threads_share_one_object_per_section() -> None:
    engine = Engine(autoload=False)
    data = [base_scenario(gbs=256 * (1 + i % 8)) for i in range(400)]
    seen: list[list[Scenario]] = []

    def work() -> None:
        seen.append([engine.scenario(d) for d in data])

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(len(data)):
        assert len({id(run[i].plan) for run in seen}) == 1
        assert len({id(run[i].cluster) for run in seen}) == 1


def test_resolvers_outside_a_scenario_share_too(fresh: Engine) -> None:
    assert resolve_gpu("H100-SXM-80GB", fresh.catalog) is resolve_gpu("H100-SXM-80GB", fresh.catalog)
    assert resolve_model("llama3.1-8b", fresh.catalog) is resolve_model("llama3.1-8b", fresh.catalog)


def test_input_nested_too_deep_to_key_is_loaded_uncached(fresh: Engine) -> None:
    deep: object = 1
    for _ in range(5000):
        deep = [deep]
    data = {**base_scenario(), "cluster": {"system": "DGX-H100", "num_gpus": 128,
                                           "optics": {"kind": "pluggable", "params": {"x": deep}}}}
    for _ in range(2):  # the optics plugin's own error, as without caches; no RecursionError from the caches
        with pytest.raises(SpecError, match="unknown parameter"):
            fresh.scenario(data)


def test_catalog_get_still_hands_out_independent_copies(fresh: Engine) -> None:
    a = fresh.catalog.get("systems", "DGX-H100", "cluster.system")
    a["scale_out"]["nic_gbps"] = 1.0
    a["gpus_per_node"] = 3
    b = fresh.catalog.get("systems", "dgx-h100", "cluster.system")
    assert b["scale_out"]["nic_gbps"] != 1.0 and b["gpus_per_node"] != 3
    assert type(b) is dict and type(b["scale_out"]) is dict
    assert fresh.scenario(base_scenario()).cluster.gpus_per_node == 8


def test_a_plan_that_passed_on_one_cluster_is_checked_again_on_another(fresh: Engine) -> None:
    # The validation shortcut keeps (plan, model, cluster) triples that passed the plan
    # rules: the same plan object (interned) on another cluster, both already validated,
    # must still meet the rules there (tp x pp = 64 does not divide 32 GPUs).
    def scenario(gpus: int, **plan: object) -> dict:
        return {"cluster": {"system": "DGX-H100", "num_gpus": gpus}, "model": "llama3.1-70b",
                "plan": {"gbs": 512, **plan}}

    big = fresh.scenario(scenario(64, tp=8, pp=8))
    fresh.scenario(scenario(32, tp=8, pp=4))  # the 32-GPU cluster passes once
    again = fresh.scenario(scenario(64, tp=8, pp=8))
    assert again.plan is big.plan
    first, second = outcome(fresh, scenario(32, tp=8, pp=8)), outcome(fresh, scenario(32, tp=8, pp=8))
    assert first[0] == "error" and first == second
    assert first == outcome(Engine(autoload=False), scenario(32, tp=8, pp=8))
