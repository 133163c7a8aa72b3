"""Properties of plan search (issue 37): what it returns fits with its headroom, a wider space
never gives a slower best plan, bounds never change the best plans, and why memory-saving
settings cannot prune each other by dominance in this model."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from twin.core.results import HEADROOM_REASON, MEMORY_REASON
from twin.sweep.evaluator import SweepEvaluator
from twin.sweep.plansearch import (
    DEFAULT_MEMORY_HEADROOM,
    RECOMPUTE,
    SHARDINGS,
    PlanSource,
    memory_risk,
    search_plans,
    space_for,
)

KEYS = ("tp", "pp", "vp", "cp", "ep", "etp", "mbs", "recompute", "sharding", "step_time_s", "memory_gib")
# Small spaces of different kinds: dense with room to spare, dense near HBM, MoE.
SPACES = {
    "8b": ("llama3.1-8b", "DGX-H100", 16, {"gbs": 32, "seq_len": 4096}),
    "70b": ("llama3.1-70b", "DGX-H100", 32, {"gbs": 64, "seq_len": 4096}),
    "mixtral": ("mixtral-8x7b", "DGX-H100", 32, {"gbs": 64, "seq_len": 4096}),
}


def _space(engine, key, **options):
    model, system, gpus, kw = SPACES[key]
    return space_for(engine, model, system, gpus, **kw, **options)


def _top(res):
    return [{k: p.get(k) for k in KEYS} for p in res.plans()]


@pytest.mark.parametrize("key", list(SPACES))
def test_bounds_never_change_the_best_plans(engine, key):
    """Pruned by the bound against every plan costed in full: the same top N, N = 1..3."""
    space = _space(engine, key)
    for top in (1, 2, 3):
        full = search_plans(engine, space, top=top, prune=False, memory_headroom=0.0)
        pruned = search_plans(engine, space, top=top, memory_headroom=0.0)
        assert "pruned" not in " ".join(full.result.counts)
        assert _top(pruned) == _top(full), (key, top)
        assert full.result.feasible == pruned.result.feasible + pruned.pruned
        assert pruned.pruned > 0


def test_more_recompute_can_be_faster_so_it_is_no_dominance(engine):
    """Why the search does not drop a plan whose sibling saving less memory fits (issue 37's
    dominance): recomputation lengthens the backward, and FSDP's gathers and reduce-scatters hide
    under it, so selective recompute can beat none at the same layout. Dropping it would change
    the best plans; this is the case that showed it (Llama 3.1 70B, 32 H100, tp1 pp1 cp4 dp8 mbs1, FSDP)."""
    space = _space(engine, "70b", shardings=("fsdp",), max_tp=1)
    batch = PlanSource(space).batch(0, space.total)
    ev = SweepEvaluator(engine).evaluate(batch)
    plans = [batch.scenario(i).plan for i in range(len(batch))]
    t = {(p.pp, p.cp, p.mbs, p.vp, p.recompute): ev.floats["step_time_s"][i] for i, p in enumerate(plans)
         if ev.reason_ix[i] < 0}
    none, selective = t[(1, 4, 1, 1, "none")], t[(1, 4, 1, 1, "selective")]
    assert selective < none


@pytest.mark.parametrize("headroom", [0.0, DEFAULT_MEMORY_HEADROOM, 0.3])
def test_every_returned_plan_fits_with_its_headroom(engine, headroom):
    for key in SPACES:
        res = search_plans(engine, _space(engine, key), top=5, memory_headroom=headroom)
        assert res.plans(), key
        for plan in res.plans():
            mem = plan["estimate"]["memory"]
            assert mem["fits"] and mem["total_gib"] <= (1 - headroom) * mem["capacity_gib"], (key, headroom)
            assert plan["memory_risk"]["risk"] == ("ok" if mem["total_gib"] <= (1 - max(
                headroom, DEFAULT_MEMORY_HEADROOM)) * mem["capacity_gib"] else "tight")


def test_plans_inside_the_headroom_are_counted_apart_from_those_over_hbm(engine):
    space = _space(engine, "70b")
    loose = search_plans(engine, space, top=1, memory_headroom=0.0)
    strict = search_plans(engine, space, top=1, memory_headroom=0.3)
    tight = strict.result.counts.get(HEADROOM_REASON, 0)
    assert HEADROOM_REASON not in loose.result.counts and tight > 0
    # a plan over HBM stays "does not fit"; the headroom only moves plans that fit
    assert strict.result.counts[MEMORY_REASON] == loose.result.counts[MEMORY_REASON]
    assert strict.result.feasible + strict.pruned + tight == loose.result.feasible + loose.pruned


def test_memory_risk():
    near = memory_risk({"total_gib": 78.0, "capacity_gib": 80.0})
    assert near["risk"] == "tight" and near["hbm_share"] == pytest.approx(0.975) and near["free_gib"] == 2.0
    assert memory_risk({"total_gib": 70.0, "capacity_gib": 80.0})["risk"] == "ok"
    assert memory_risk({"total_gib": 70.0, "capacity_gib": 80.0}, headroom=0.2)["risk"] == "tight"


def test_widening_the_space_never_gives_a_slower_best_plan(engine):
    """Every narrower space (fewer shardings, recompute settings, tp or cp values) is a subset of
    the wide one: the wide search's best is at most the narrow one's, ties included."""
    rng = np.random.default_rng(37)
    for key in ("8b", "70b", "mixtral"):
        wide = search_plans(engine, _space(engine, key), top=1)
        best = wide.plans()[0]["step_time_s"]
        for _ in range(3):
            shard = tuple(s for s in SHARDINGS if rng.random() < 0.6) or ("distributed_optimizer",)
            rec = tuple(r for r in RECOMPUTE if rng.random() < 0.6) or ("full",)
            options = {"shardings": shard, "recompute": rec, "max_tp": int(rng.choice([2, 4, 8]))}
            narrow = search_plans(engine, _space(engine, key, **options), top=1)
            if narrow.plans():
                assert best <= narrow.plans()[0]["step_time_s"], (key, options)
        # and the wide best is the narrow best where the narrow space holds it
        p = wide.plans()[0]
        same = search_plans(engine, _space(engine, key, shardings=(p["sharding"],), recompute=(p["recompute"],),
                                          cp_values=(p["cp"],)), top=1)
        assert same.plans()[0]["step_time_s"] == best


def test_plan_cli_shows_the_headroom_and_each_plans_risk():
    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "twin.cli", "plan", "--model", "llama3.1-70b", "--system",
                               "DGX-H100", "--gpus", "32", "--gbs", "64", "--seq-len", "4096", *args],
                              check=False, capture_output=True, text=True, timeout=300,
                              env={"TWIN_DISABLE_PLUGIN_AUTOLOAD": "1", "PATH": "/usr/bin:/bin"})

    out = cli("--top", "3", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["memory_headroom"] == DEFAULT_MEMORY_HEADROOM
    assert all(p["memory_risk"]["risk"] == "ok" and p["memory_risk"]["hbm_share"] <= 0.9 for p in doc["top"])
    # no headroom: the fastest plans sit nearer HBM, and those within 10% of it say so
    out = cli("--top", "3", "--memory-headroom", "0")
    assert out.returncode == 0, out.stderr
    assert "% of HBM" in out.stdout and "memory headroom" in out.stdout
    bare = json.loads(cli("--top", "3", "--memory-headroom", "0", "--json").stdout)
    tight = [p for p in bare["top"] if p["memory_risk"]["hbm_share"] > 0.9]
    assert all(p["memory_risk"]["risk"] == "tight" for p in tight)
    assert ("TIGHT" in out.stdout) == bool(tight)
    bad = cli("--memory-headroom", "1.5")
    assert bad.returncode == 2 and "memory_headroom" in bad.stderr


def test_explain_gives_the_memory_by_term_and_its_risk():
    """Issue 37 item 4: --explain sets the two plans' memory side by side, term by term."""
    out = subprocess.run([sys.executable, "-m", "twin.cli", "plan", "--model", "llama3.1-8b", "--system", "DGX-H100",
                          "--gpus", "16", "--gbs", "32", "--seq-len", "4096", "--top", "2", "--explain", "--json"],
                         check=False, capture_output=True, text=True, timeout=300,
                         env={"TWIN_DISABLE_PLUGIN_AUTOLOAD": "1", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    ex, (best, second) = doc["explain"], doc["top"][:2]
    terms = ex["memory_terms_gib"]
    assert {t["term"] for t in terms} == {"weights", "gradients", "optimizer", "activations", "logits", "runtime"}
    assert sum(t["best"] for t in terms) == pytest.approx(best["estimate"]["memory"]["total_gib"])
    assert sum(t["runner_up"] for t in terms) == pytest.approx(second["estimate"]["memory"]["total_gib"])
    assert ex["memory_risk"]["best"] == best["memory_risk"]
