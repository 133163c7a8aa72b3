"""Plan search covers every valid plan and finds the fastest one that fits."""

from __future__ import annotations

import dataclasses
import itertools
import json
import subprocess
import sys

import numpy as np
import pytest

from twin.core.errors import TwinError
from twin.core.specs import validate_plan
from twin.sweep.plansearch import (
    RECOMPUTE,
    SHARDINGS,
    PlanSource,
    divisors,
    plan_scenario,
    runnable_vps,
    search_plans,
    space_for,
)
from twin.sweep.reduce import nrows, row_dict


def test_divisors():
    assert divisors(1) == [1]
    assert divisors(36) == [1, 2, 3, 4, 6, 9, 12, 18, 36]


def test_runnable_interleaving_depths_by_hand():
    # Llama 3.1 8B, 32 layers on 4 stages: 8 per stage; vp 2, 4, 8 split them evenly, and
    # no vp makes 4*vp divide 32, 33 or 34 otherwise (vp 3: 12; 5: 20; 6: 24; 7: 28).
    assert runnable_vps(32, 4) == [1, 2, 4, 8]
    # Llama 3.1 405B, 126 layers on 16 stages: with the embedding and the loss counted as
    # layers (128), vp 2 (32 virtual stages of 4) and vp 4 (64 of 2); vp 3, 5, 6, 7 do not run.
    assert runnable_vps(126, 16) == [1, 2, 4]
    # DeepSeek-V3, 61 layers on 16 stages: 32 and 48 divide none of 61, 62, 63.
    assert runnable_vps(61, 16) == [1]
    assert runnable_vps(61, 16, "interleaved") == []
    assert runnable_vps(61, 16, "dualpipev") == [2] and runnable_vps(61, 16, "dualpipe") == [1]
    assert runnable_vps(32, 1) == [1] and runnable_vps(32, 1, "1f1b") == []


def test_a_stated_uneven_interleaving_still_validates(engine):
    """The search skips vp 3 on 4 stages of 32 layers; a plan that states it is evaluated."""
    est = engine.evaluate({"cluster": {"system": "DGX-H100", "num_gpus": 32}, "model": "llama3.1-8b",
                           "plan": {"tp": 8, "pp": 4, "vp": 3, "gbs": 64}})
    assert est.step_time_s > 0


def test_space_is_exactly_the_valid_plans(engine):
    """Brute force over every degree combination: the valid (and, for vp > 1, runnable:
    :func:`runnable_vps`) ones are exactly the space."""
    space = space_for(engine, "llama3.1-8b", "DGX-H100", 32, gbs=64, seq_len=2048,
                      shardings=("distributed_optimizer",), recompute=("none",))
    model, cluster = space.model, space.cluster
    valid = set()
    for tp, pp, cp in itertools.product(divisors(32), repeat=3):
        for vp in range(1, model.layers + 2):
            for mbs in [*divisors(64), 3, 5]:
                plan = dataclasses.replace(space.base, tp=tp, pp=pp, cp=cp, vp=vp, mbs=mbs)
                try:
                    validate_plan(plan, model, cluster)
                except TwinError:
                    continue
                if vp in runnable_vps(model.layers, pp):
                    valid.add((tp, pp, cp, vp, mbs))
    source = PlanSource(space)
    batch = source.batch(0, space.total)
    found = set()
    for i in range(len(batch)):
        p = batch.scenario(i).plan
        found.add((p.tp, p.pp, p.cp, p.vp, p.mbs))
    assert len(found) == space.total  # no plan twice
    assert found == valid


def test_a_stated_schedule_searches_the_plans_it_runs(engine):
    """With plan.schedule in the base, the space is its pipelined plans at the depths it runs,
    and every schedule-valid plan of the brute force is in it."""
    model_kw = dict(gbs=64, seq_len=2048, shardings=("distributed_optimizer",), recompute=("none",))
    for schedule, depths in (("zero_bubble_v", {2}), ("dualpipe", {1}), ("interleaved", None)):
        space = space_for(engine, "llama3.1-8b", "DGX-H100", 32, plan={"schedule": schedule}, **model_kw)
        batch = PlanSource(space).batch(0, space.total)
        plans = [batch.scenario(i).plan for i in range(len(batch))]
        assert plans and all(p.pp > 1 and p.schedule == schedule for p in plans)
        vps = {p.vp for p in plans}
        assert vps == depths if depths else min(vps) == 2
        found = {(p.tp, p.pp, p.cp, p.vp, p.mbs) for p in plans}
        for tp, pp, cp in itertools.product(divisors(32), repeat=3):
            for vp in (1, 2, 3):
                for mbs in divisors(64):
                    plan = dataclasses.replace(space.base, tp=tp, pp=pp, cp=cp, vp=vp, mbs=mbs)
                    try:
                        validate_plan(plan, space.model, space.cluster)
                    except TwinError:
                        continue
                    if vp in runnable_vps(space.model.layers, pp, schedule):
                        assert (tp, pp, cp, vp, mbs) in found, (schedule, tp, pp, cp, vp, mbs)
        res = search_plans(engine, space, top=1)
        assert res.plans()[0]["estimate"]["breakdown"]["bubble_s"] >= 0
        assert plan_scenario(space, res.plans()[0]).plan.schedule == schedule


def test_search_finds_the_brute_force_best(engine):
    space = space_for(engine, "llama3.1-8b", "DGX-H100", 16, gbs=32, seq_len=4096,
                      shardings=("distributed_optimizer", "fsdp"), recompute=("none", "full"))
    res = search_plans(engine, space, top=3)
    assert res.result.done == space.total and not res.result.cancelled
    best = None
    fits = 0
    source = PlanSource(space)
    batch = source.batch(0, space.total)
    for i in range(len(batch)):
        scn = batch.scenario(i)
        assert scn.plan.gbs == 32
        try:
            est = engine.evaluate(scn, report=False)
        except TwinError:
            continue
        if est.fits:
            fits += 1
            best = est.step_time_s if best is None else min(best, est.step_time_s)
    # pruned plans fit too: they are only not costed in full
    assert res.result.feasible + sum(v for k, v in res.result.counts.items() if k.startswith("pruned")) == fits
    top = [row_dict(res.result.top, i) for i in range(nrows(res.result.top))]
    assert top[0]["step_time_s"] == best
    assert [t["step_time_s"] for t in top] == sorted(t["step_time_s"] for t in top)
    # the full re-evaluation of each listed plan agrees with the ranked figure
    for row, est in zip(top, res.estimates, strict=True):
        assert est["step_time_s"] == row["step_time_s"]
        assert est["memory"]["fits"]
        assert engine.evaluate(plan_scenario(space, row)).step_time_s == row["step_time_s"]


def test_hybrid_sharding_is_searched_within_each_nvlink_domain(engine):
    """'hsdp': FSDP sharded over the data-parallel ranks of one NVLink domain (8 H100s: 8/tp of
    them), replicated across domains; only where that is a proper hybrid. Its rows are 'hsdp'
    and their full re-evaluation (plan.dp_shard) is the ranked figure."""
    space = space_for(engine, "llama3.1-8b", "DGX-H100", 64, gbs=128, seq_len=4096,
                      shardings=("fsdp", "hsdp"), recompute=("none",))
    batch = PlanSource(space).batch(0, space.total)
    hybrid = 0
    for i in range(len(batch)):
        p = batch.scenario(i).plan
        dpcp = 64 // (p.tp * p.pp * p.cp) * p.cp
        if p.dp_shard:
            hybrid += 1
            assert p.optimizer_sharding == "fsdp" and p.dp_shard == 8 // p.tp and p.dp_shard < dpcp
    assert hybrid > 0
    res = search_plans(engine, space, top=40, prune=False)
    top = [row_dict(res.result.top, i) for i in range(nrows(res.result.top))]
    rows = [r for r in top if r["sharding"] == "hsdp"]
    assert rows, sorted({r["sharding"] for r in top})
    for row in rows[:3]:
        scn = plan_scenario(space, row)
        assert scn.plan.dp_shard == 8 // row["tp"]
        assert engine.evaluate(scn).step_time_s == row["step_time_s"]


def test_moe_space_includes_expert_parallel_plans(engine):
    space = space_for(engine, "mixtral-8x7b", "DGX-H100", 64, gbs=256, shardings=("distributed_optimizer",),
                      recompute=("selective",))
    eps = {int(e) for e in space.groups[:, 3]}
    assert eps == {1, 2, 4, 8}
    res = search_plans(engine, space, top=5)
    assert res.result.feasible > 0
    assert set(SHARDINGS) >= {"fsdp", "fsdp-noreshard"} and "full" in RECOMPUTE


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "twin.cli", "plan", *args], check=False, capture_output=True,
                          text=True, timeout=300, env={"TWIN_DISABLE_PLUGIN_AUTOLOAD": "1", "PATH": "/usr/bin:/bin"})


def test_plan_cli_json_and_table():
    out = cli("--model", "llama3.1-8b", "--system", "DGX-H100", "--gpus", "16", "--gbs", "32", "--seq-len", "4096",
              "--top", "3", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["plans_searched"] == data["plans_total"] > 100
    assert 1 <= len(data["top"]) <= 3
    first = data["top"][0]
    assert first["estimate"]["breakdown"]["compute_s"] > 0 and first["estimate"]["memory"]["fits"]
    table = cli("--model", "llama3.1-8b", "--system", "DGX-H100", "--gpus", "16", "--gbs", "32", "--top", "2")
    assert table.returncode == 0, table.stderr
    assert "plans searched" in table.stdout and "#1:" in table.stdout and "compute" in table.stdout


def test_plan_cli_searches_with_a_schedule():
    out = cli("--model", "llama3.1-8b", "--system", "DGX-H100", "--gpus", "16", "--gbs", "64", "--seq-len", "4096",
              "--top", "2", "--schedule", "zero_bubble_v", "--json")
    assert out.returncode == 0, out.stderr
    top = json.loads(out.stdout)["top"]
    assert top and all(p["pp"] > 1 and p["vp"] == 2 for p in top)
    table = cli("--model", "llama3.1-8b", "--system", "DGX-H100", "--gpus", "16", "--gbs", "64", "--top", "1",
                "--schedule", "dualpipe")
    assert table.returncode == 0 and "schedule=dualpipe" in table.stdout, table.stderr
    bad = cli("--model", "llama3.1-8b", "--system", "DGX-H100", "--gpus", "16", "--schedule", "zigzag")
    assert bad.returncode == 2 and "plan.schedule" in bad.stderr and "Traceback" not in bad.stderr


def test_plan_cli_searches_several_schedules_and_ranks_them_together():
    """--schedule a,b (or all): each schedule searched with the plans it runs, the best of all ranked
    together by step time; the best is the best of the single-schedule searches."""
    common = ("--model", "llama3.1-8b", "--system", "DGX-H100", "--gpus", "16", "--gbs", "64", "--seq-len", "4096",
              "--top", "4", "--json")
    both = cli(*common, "--schedule", "1f1b,zero_bubble_h1")
    assert both.returncode == 0, both.stderr
    data = json.loads(both.stdout)
    assert [s["schedule"] for s in data["searches"]] == ["1f1b", "zero_bubble_h1"]
    steps = [p["estimate"]["step_time_s"] for p in data["top"]]
    assert steps == sorted(steps) and {p["schedule"] for p in data["top"]} <= {"1f1b", "zero_bubble_h1"}
    alone = [json.loads(cli(*common, "--schedule", s).stdout)["top"][0]["estimate"]["step_time_s"]
             for s in ("1f1b", "zero_bubble_h1")]
    assert steps[0] == min(alone)
    every = cli(*common[:-1], "--schedule", "all", "--no-progress")
    assert every.returncode == 0 and "7 schedules" in every.stdout and "dualpipev" in every.stdout, every.stderr
    bad = cli(*common, "--schedule", "1f1b,zigzag")
    assert bad.returncode == 2 and "plan.schedule" in bad.stderr and "Traceback" not in bad.stderr


def test_plan_cli_bad_input_names_the_field(tmp_path):
    out = cli("--model", "llama3.1-8b", "--system", "DGX-H100", "--gpus", "0")
    assert out.returncode == 2 and "gpus" in out.stderr and "Traceback" not in out.stderr
    out = cli("--model", "gpt-99", "--system", "DGX-H100", "--gpus", "8")
    assert out.returncode == 3 and "model" in out.stderr
    out = cli("--model", "llama3.1-8b", "--system", "DGX-H100", "--gpus", "12")
    assert out.returncode == 2 and "cluster.num_gpus" in out.stderr
    f = tmp_path / "m.yaml"
    f.write_text("model: {preset: llama3.1-8b, layers: 0}\n")
    out = cli("--model", str(f), "--system", "DGX-H100", "--gpus", "8")
    assert out.returncode == 2 and "model.layers" in out.stderr


def test_memory_headroom_keeps_hbm_free(engine):
    from twin.sweep.evaluator import SweepEvaluator

    space = space_for(engine, "llama3.1-8b", "DGX-H100", 8, gbs=16, seq_len=8192,
                      shardings=("distributed_optimizer",), recompute=("none", "full"))
    batch = PlanSource(space).batch(0, space.total)
    plain = SweepEvaluator(engine).evaluate(batch)
    vec = SweepEvaluator(engine, memory_headroom=0.25).evaluate(batch)
    ok_plain, ok_vec = plain.reason_ix < 0, vec.reason_ix < 0
    # Each point alone: fits with 25% of HBM left free exactly where the batch says so.
    for i in range(len(batch)):
        scn = batch.scenario(i)
        try:
            est = engine.evaluate(scn, report=False)
        except TwinError:
            assert not ok_vec[i]
            continue
        assert ok_vec[i] == (est.fits and est.memory.total <= est.memory.capacity * 0.75), i
    assert ok_vec.sum() < ok_plain.sum() and not (ok_vec & ~ok_plain).any()
    assert (vec.floats["memory_gib"][ok_vec] <= 0.75 * 80).all()
    assert (plain.floats["memory_gib"][ok_plain & ~ok_vec] > 0.75 * 80).all()
    res = search_plans(engine, space, top=3, memory_headroom=0.25)
    assert all(e["memory"]["total_gib"] <= 60 for e in res.estimates)


def test_plan_cli_explains_why_the_best_beats_the_runner_up():
    """Issue 12 item 5: --explain names the plan fields that differ and the parts of the step
    that make up the difference, which add up to it."""
    out = cli("--model", "llama3.1-8b", "--system", "DGX-H100", "--gpus", "16", "--gbs", "32", "--seq-len", "4096",
              "--top", "1", "--explain", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    ex = data["explain"]
    best, second = data["top"][0], data["top"][1]                 # --explain asks for a runner-up
    assert ex["step_time_s"]["difference"] == pytest.approx(
        second["estimate"]["step_time_s"] - best["estimate"]["step_time_s"])
    assert ex["step_time_s"]["difference"] >= 0
    assert ex["plan_differences"] and all(best[k] == v["best"] and second[k] == v["runner_up"]
                                          for k, v in ex["plan_differences"].items())
    parts = sum(row["runner_up_minus_best"] for row in ex["parts_s"])
    assert parts == pytest.approx(ex["step_time_s"]["difference"], abs=1e-6)
    table = cli("--model", "llama3.1-8b", "--system", "DGX-H100", "--gpus", "16", "--gbs", "32", "--explain")
    assert table.returncode == 0 and "Why #1 beats #2" in table.stdout, table.stderr


def test_explain_with_a_single_plan_says_there_is_no_runner_up():
    from twin.commands.cmd_plan import explain

    assert "no runner-up" in explain([{"estimate": {}}])["reason"]


def test_pruned_search_finds_the_same_best_plans(engine):
    """Branch and bound (the default) against every plan costed in full: the same top plans."""
    space = space_for(engine, "mixtral-8x7b", "DGX-H100", 64, gbs=256)
    full = search_plans(engine, space, top=5, prune=False)
    pruned = search_plans(engine, space, top=5)
    assert "pruned" not in " ".join(full.result.counts)
    cut = sum(v for k, v in pruned.result.counts.items() if k.startswith("pruned"))
    assert cut > space.total // 10            # the bound does prune
    keys = ("tp", "pp", "vp", "cp", "ep", "etp", "mbs", "recompute", "sharding", "step_time_s", "memory_gib")
    assert [{k: p.get(k) for k in keys} for p in pruned.plans()] == [{k: p.get(k) for k in keys} for p in full.plans()]


def test_a_point_at_or_below_the_bar_is_never_pruned(engine):
    """The lower bound is below every point's step: with the bar at any point's step time,
    every point at or below it is costed, with the numbers it has unpruned."""
    from twin.core.results import PRUNED_REASON
    from twin.core.run.pruning import Pruner

    space = space_for(engine, "llama3.1-70b", "DGX-H100", 256, gbs=512, shardings=("distributed_optimizer",))
    batch = PlanSource(space).batch(0, space.total)
    ps = batch.point_set(np.arange(len(batch)))
    full = engine.evaluate_points(ps)
    t = full.columns["step_time_s"][full.feasible]
    for bar in np.quantile(t, [0.01, 0.2, 0.5]):
        res = engine.evaluate_points(ps, prune=Pruner(top=1, best=[float(bar)]))
        pruned = np.asarray([res.reason(i) == PRUNED_REASON for i in range(len(ps))])
        assert pruned.any()
        below = full.feasible & (full.columns["step_time_s"] <= bar)
        assert below.any() and not pruned[below].any()
        assert np.array_equal(res.columns["step_time_s"][below], full.columns["step_time_s"][below])
        assert (full.columns["step_time_s"][pruned] > bar).all()
