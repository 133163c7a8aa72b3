"""The public batch API: Engine.evaluate_many gives, row by row, what Engine.evaluate gives.

Random scenarios over every preset model and system (validation/equivalence.py's points,
pipeline schedules included),
mixed in one call: the batch groups them by model, evaluates each group over arrays and
puts the rows back in order. A row that does not parse or breaks a rule carries the
reason a sweep would count; a plan that does not fit is evaluated anyway (``fits`` false),
as ``Engine.evaluate`` does, unless ``require_fit`` asks otherwise.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

from twin.core.errors import TwinError, reason_of
from twin.core.results import energy_values
from twin.engine import Engine

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "validation"))
import equivalence


def test_evaluate_many_equals_evaluate_row_by_row():
    engine = Engine(autoload=False)
    points = equivalence.points(1500, seed=99)
    points.append({"cluster": {"system": "DGX-H100", "num_gpus": 8}, "model": "no-such-model", "plan": {"gbs": 8}})
    res = engine.evaluate_many(points)
    assert len(res) == len(points)
    evaluated = unfit = priced = idle = 0
    for i, p in enumerate(points):
        try:
            est = Engine.evaluate(engine, p)
        except TwinError as err:
            assert res.reason(i) == reason_of(err), i
            continue
        except ArithmeticError:
            assert res.reason(i) is not None
            continue
        assert res.reason(i) is None, (i, res.reason(i))
        evaluated += 1
        unfit += not est.fits
        assert bool(res.fits[i]) == est.fits
        assert res.columns["step_time_s"][i] == est.step_time_s
        assert res.columns["memory_gib"][i] == est.memory.total / 2**30
        assert res.columns["mfu"][i] == est.mfu
        for dim, v in est.breakdown.exposed_comm_s.items():
            assert res.columns[f"exposed_{dim}_s"][i] == v, (i, dim)
        for name, v in energy_values(est).items():       # energy by component, cost (NaN: no prices)
            got = res.columns[name][i]
            assert got == v or (math.isnan(got) and math.isnan(v)), (i, name, got, v)
        priced += est.cost is not None
        idle += est.energy.gpu_wait_s > 0 and not est.energy.assumed
        assert res.microbatches[i] == est.microbatches and res.dp[i] == est.dp
    assert evaluated > 500 and unfit > 20
    assert priced > 50 and idle > 50      # the random points set prices and GPU waiting power
    assert res.reason(len(points) - 1) == "model: unknown name 'no-such-model'"
    assert res.stats["scalar_points"] == 0


def test_require_fit_makes_plans_that_do_not_fit_infeasible():
    engine = Engine(autoload=False)
    points = equivalence.points(400, seed=98)
    loose = engine.evaluate_many(points)
    strict = engine.evaluate_many(points, require_fit=True)
    ok_loose = np.asarray([loose.reason(i) is None for i in range(len(points))])
    ok_strict = np.asarray([strict.reason(i) is None for i in range(len(points))])
    assert (ok_strict == (ok_loose & loose.fits)).all()
    assert {strict.reason(i) for i in np.flatnonzero(ok_loose & ~loose.fits)} == {"memory: does not fit in HBM"}
    both = ok_strict
    assert np.array_equal(strict.columns["step_time_s"][both], loose.columns["step_time_s"][both])
    assert all(math.isnan(v) for v in strict.columns["step_time_s"][~ok_strict])


def test_repeated_scenarios_share_plan_columns_and_keep_their_rows():
    # Equal mappings give the same (interned) plan object, so the batch builds each distinct
    # plan's columns once and indexes them per point: every copy must still get its own
    # scenario's answer, in place, whatever the order of the copies.
    engine = Engine(autoload=False)
    points = equivalence.points(300, seed=7)
    batch = points + points[::-1] + points
    res = engine.evaluate_many(batch)
    n = len(points)
    checked = 0
    for i, p in enumerate(points):
        try:
            step = Engine.evaluate(engine, p).step_time_s
        except (TwinError, ArithmeticError):
            assert res.reason(i) is not None and res.reason(i) == res.reason(2 * n - 1 - i) == res.reason(2 * n + i)
            continue
        for row in (i, 2 * n - 1 - i, 2 * n + i):
            assert res.reason(row) is None, (i, row, res.reason(row))
            assert res.columns["step_time_s"][row] == step, (i, row)
        checked += 1
    assert checked > 100


def test_sparse_batch_results_read_back_as_the_dense_columns():
    """evaluate_points(sparse=True) keeps the writes instead of full-length columns; read
    at the feasible points (in any order) they are the dense columns' values, and made
    dense they are the same columns.
    """
    from twin.core.point_set import PointSet

    engine = Engine(autoload=False)
    scenarios = [engine.scenario({"cluster": {"system": system, "num_gpus": gpus}, "model": "llama3.1-70b",
                                  "plan": {"tp": tp, "pp": pp, "gbs": gbs}})
                 for system in ("DGX-H100", "Meta-RoCE-H100") for gpus in (64, 256) for tp in (2, 8)
                 for pp in (2, 4) for gbs in (256, 1024)]
    points = PointSet.from_scenarios(scenarios)
    dense = engine.evaluate_points(points, require_fit=False)
    sparse = engine.evaluate_points(points, require_fit=False, sparse=True)
    assert sparse.columns == {} and set(sparse.names()) == set(dense.columns)
    ok = np.flatnonzero(dense.reason_ix < 0)
    assert len(ok) > 10 and np.array_equal(sparse.reason_ix, dense.reason_ix)
    shuffled = ok[np.random.default_rng(3).permutation(len(ok))]
    for name, col in dense.columns.items():
        got = sparse.values_at(name, ok)
        want = col[ok]
        if name.startswith("exposed_"):  # a dimension no strategy of a point reported: 0 dense, NaN sparse
            got = np.nan_to_num(got, nan=0.0)
        assert np.array_equal(got, want, equal_nan=True), name
        assert np.array_equal(np.nan_to_num(sparse.values_at(name, shuffled), nan=0.0) if name.startswith("exposed_")
                              else sparse.values_at(name, shuffled), col[shuffled], equal_nan=True), name
    for name, col in dense.columns.items():  # every row it was written at, and NaN elsewhere
        if name.startswith("exposed_"):
            continue
        written = sparse.written(name)
        assert np.array_equal(sparse.values_at(name, written), col[written], equal_nan=True), name
        assert np.isnan(np.delete(col, written)).all(), name
    sparse.dense()
    assert sparse.columns.keys() == dense.columns.keys()
    for name, col in dense.columns.items():
        made = sparse.columns[name]
        if name.startswith("exposed_"):
            made = np.where((sparse.reason_ix < 0) & np.isnan(made), 0.0, made)
        assert np.array_equal(made, col, equal_nan=True), name


def test_sparse_writes_read_back_as_put_would_have_written_them():
    """PointResults with pending writes (sparse): values_at is the dense column at the rows
    read, whatever the writes' rows: the very rows read (the usual case), the same rows in
    another order, a part of them, rows beyond them, and a later write over an earlier one."""
    from twin.core.results import PointResults

    rng = np.random.default_rng(12)
    for _ in range(200):
        n = int(rng.integers(1, 30))
        read = np.flatnonzero(rng.random(n) < 0.6)
        writes = [read.copy(), read[rng.permutation(len(read))], rng.permutation(n)[: int(rng.integers(0, n + 1))],
                  np.sort(rng.permutation(n)[: int(rng.integers(0, n + 1))])]
        order = rng.permutation(len(writes))[: int(rng.integers(1, len(writes) + 1))]
        sparse = PointResults(np.full(n, -1), [], {}, np.zeros(n, int), np.zeros(n, int))
        sparse._pending = {}
        dense = PointResults(np.full(n, -1), [], {}, np.zeros(n, int), np.zeros(n, int))
        for k in order.tolist():
            values = rng.random(len(writes[k]))
            sparse.put("x", writes[k], values)
            dense.put("x", writes[k], values)
        assert np.array_equal(sparse.values_at("x", read), dense.columns["x"][read], equal_nan=True)
        assert np.array_equal(sparse.values_at("x", read), dense.columns["x"][read], equal_nan=True)  # cached


def test_models_differing_in_seq_len_only_share_one_batch_and_keep_every_answer():
    # Sequence length is a number the step model computes with, like the micro-batch: scenarios
    # whose models differ in it only are one batch (one structure), each point at its own length.
    structures = [
        {"preset": "llama3.1-8b"},
        {"preset": "mixtral-8x7b"},
        {"preset": "deepseek-v3"},                                                # MLA, MoE, MTP
        {"preset": "llama3.1-8b", "sliding_window": {"window": 1024, "every_other_layer": True}},
        {"preset": "llama3.1-8b", "packed_doc_tokens": 1500},
        {"layers": 4, "hidden": 4096, "heads": 32, "vocab": 32000, "hybrid": {"pattern": "M*M-"}},
    ]
    seq_lens = [2048, 4096, 6144]
    plans = [{"tp": 2, "pp": 2, "mbs": 1, "gbs": 64, "recompute": "selective"},
             {"tp": 1, "cp": 2, "mbs": 2, "gbs": 128, "recompute": "none"},
             {"tp": 4, "mbs": 1, "gbs": 32, "recompute": "full", "sequence_parallel": True}]
    points = []
    for k, structure in enumerate(structures):
        for s in seq_lens:
            for j, plan in enumerate(plans):
                # Half the points on a stack without fused attention: the score matrix's bytes
                # grow with each point's own length (memory.activation_bytes_per_token_layer).
                software = "megatron-deepspeed" if (j + k) % 2 else "megatron-core-te"
                ep = {"ep": 2} if "mixtral" in str(structure) or "deepseek" in str(structure) else {}
                points.append({"cluster": {"system": "DGX-H100", "num_gpus": 16},
                               "model": {**structure, "seq_len": s}, "plan": {**plan, **ep}, "software": software})
    # A length the context-parallel rule refuses (the batch checks each point at its own length).
    points.append({"cluster": {"system": "DGX-H100", "num_gpus": 16},
                   "model": {"preset": "llama3.1-8b", "seq_len": 2050}, "plan": plans[1],
                   "software": "megatron-core-te"})
    engine = Engine(autoload=False)
    res = engine.evaluate_many(points)
    # One batch per (structure, software stack), whatever the lengths.
    assert res.stats["batches"] == len(structures) * 2
    assert res.stats["scalar_points"] == 0
    one = Engine(autoload=False)
    evaluated = 0
    for i, p in enumerate(points):
        try:
            est = one.evaluate(p)
        except TwinError as err:
            assert res.reason(i) == reason_of(err), i
            continue
        assert res.reason(i) is None, (i, res.reason(i))
        evaluated += 1
        assert res.columns["step_time_s"][i] == est.step_time_s, i
        assert res.columns["memory_gib"][i] == est.memory.total / 2**30, i
        assert res.columns["tokens_per_s"][i] == est.tokens_per_s, i
        assert res.columns["mfu"][i] == est.mfu, i
        assert res.columns["compute_s"][i] == est.breakdown.compute_s, i
        for dim, v in est.breakdown.exposed_comm_s.items():
            assert res.columns[f"exposed_{dim}_s"][i] == v, (i, dim)
    assert evaluated == len(points) - 1
    assert res.reason(len(points) - 1) == "plan.cp: 2*cp must divide seq_len"  # its own length, not 2048
    # The lengths matter: the same plan and structure is slower on longer sequences.
    step = res.columns["step_time_s"]
    assert step[0] < step[len(plans)] < step[2 * len(plans)]


# A knob set away from its default on every point of a batch (the batch holds it as one
# value for all points, a broadcast view): the rules only it can break still run, per point.
# Each case: the knob and the field a rule names when some of the plans below break it.
CONSTANT_KNOBS = [
    ({"schedule": "dualpipe"}, "plan.pp"),
    ({"cp_comm_type": "a2a"}, "plan.cp_comm_type"),
    ({"dp_shard": 3}, "plan.dp_shard"),
    ({"lora_rank": 8}, "plan.lora_rank"),
    ({"fsdp_reshard_after_forward": False}, "plan.fsdp_reshard_after_forward"),
    ({"recompute_modules": ["moe"], "recompute": "selective"}, "plan.recompute_modules"),
    ({"pp_first_layers": 3}, "plan.pp_first_layers"),
    ({"recipe": "mxfp8", "precision": "fp8"}, "plan.recipe"),
    ({"bf16_layers_start": 1}, "plan.bf16_layers_start"),
    ({"offload": {"optimizer": "cxl"}}, "plan.offload.optimizer"),
]


def test_a_knob_set_on_every_point_of_a_batch_is_still_checked_per_point():
    engine = Engine(autoload=False)
    for knob, field in CONSTANT_KNOBS:
        plans = [{"gbs": 96, "tp": tp, "pp": pp, **knob} for tp in (1, 2) for pp in (1, 3, 4)]
        points = [{"cluster": {"system": "DGX-H100", "num_gpus": 24}, "model": "llama3.1-8b", "plan": p}
                  for p in plans]
        res = engine.evaluate_many(points)
        named = 0
        for i, p in enumerate(points):
            try:
                Engine.evaluate(engine, p)
            except TwinError as err:
                assert res.reason(i) == reason_of(err), (knob, i, res.reason(i), reason_of(err))
                named += reason_of(err).startswith(field + ":")
                continue
            assert res.reason(i) is None, (knob, i, res.reason(i))
        assert named > 0, (knob, [res.reason(i) for i in range(len(points))])
