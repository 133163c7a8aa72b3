"""The bottleneck stage's numbers of a batch's distinct work keys, remembered across batches.

A sweep's batches share most of their work keys (the same degrees on other cluster sizes and
fabrics): rows seen before come from the driver's ``stage rows`` memo (a key -> its block and
row), the rest are computed over arrays together and stored as one block of columns; rows are
gathered from the blocks by index, never taken out one by one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from twin.core.compute import Device
from twin.core.interfaces import StageTimes
from twin.core.memory import ActivationTerms, activation_terms
from twin.core.pipelines import pairs_end_stages
from twin.core.point_set import PlanColumns, take_model_rows
from twin.core.run.columns import Driver, column, take_tree
from twin.core.schedule import stage_params, stage_times
from twin.core.specs import DEFAULT_SOFTWARE, Model, Software
from twin.core.workload import Workload


def stage_rows(driver: Driver, plan: PlanColumns, model: Model, dev: Device, w: Workload,
               devs: Sequence[Device], rows: np.ndarray, sw: Software = DEFAULT_SOFTWARE,
               models: Sequence[Model] = (), model_rows_ix: np.ndarray | None = None,
               ) -> tuple[StageTimes, np.ndarray, np.ndarray, ActivationTerms]:
    """``TwinModel.stage``'s numbers for distinct work keys (one row each), remembered across batches.

    A sweep's batches share most of their work keys (the same degrees on other cluster
    sizes and fabrics): rows seen before come from the memo, the rest are computed over
    arrays together. ``model``: the rows' model (its sequence length per row where they
    differ: ``models[model_rows_ix[i]]`` is row i's own, which its key names).
    """
    sw_key = driver.key(sw)
    if model_rows_ix is None or len(models) <= 1:
        m_keys = [(driver.key(models[0] if models else model), sw_key)] * len(rows)
    else:
        by_model = [(driver.key(m), sw_key) for m in models]
        m_keys = [by_model[k] for k in model_rows_ix.tolist()]
    d_keys = [driver.key(d) for d in devs]
    cols = (plan.tp, plan.cp, plan.mbs, plan.sp, plan.ep, plan.expert_tp, plan.pp, plan.recompute_layers,
            plan.bf16_layers_start, plan.bf16_layers_end, plan.pp_first_layers, plan.pp_last_layers,
            np.asarray(pairs_end_stages(plan.schedule)))
    labels = (plan.recompute, plan.trainable, plan.precision, plan.recompute_modules, plan.recipe,
              plan.moe_dispatcher)
    keys = [(m_key, d_keys[r], *vals, *names) for m_key, r, vals, names in zip(
        m_keys, rows.tolist(), zip(*(c.tolist() for c in cols), strict=True),
        zip(*(lab.names().tolist() for lab in labels), strict=True), strict=True)]
    memo = driver.stage_rows
    blocks = driver.stage_blocks
    known = [memo.get(k) for k in keys]
    miss = [i for i, at in enumerate(known) if at is None]
    if miss:
        if len(memo) + len(miss) > memo.limit:
            memo.clear()
            blocks.clear()
            miss = list(range(len(keys)))
        mi = np.asarray(miss, np.int64)
        m_plan, m_dev = plan.take(mi), take_tree(dev, mi)
        m_w = take_tree(w, mi)
        m_model = take_model_rows(model, mi)
        stage = stage_times(m_plan, m_model, m_dev, m_w, sw)
        params, expert = stage_params(m_plan, m_w, stage.layers)
        act = activation_terms(m_plan, m_model, m_w, m_dev.flash)
        # One block of columns per computed set (a row per key): rows are gathered from
        # the blocks by index, never taken out one by one.
        k = len(mi)
        b = len(blocks)
        blocks.append(({f.name: column(getattr(stage, f.name), k, np.float64)
                        for f in dataclasses.fields(StageTimes)},
                       column(params, k, None), column(expert, k, np.float64),
                       {f.name: column(getattr(act, f.name), k, np.float64)
                        for f in dataclasses.fields(ActivationTerms)}))
        for j, i in enumerate(miss):
            known[i] = memo.put(keys[i], (b, j))
    where = np.asarray(known, np.int64).reshape(-1, 2)
    n = len(keys)
    used = np.unique(where[:, 0])
    if len(used) == 1:  # one block: plain fancy indexing
        st, pa, ex, ac = blocks[int(used[0])]
        rows = where[:, 1]
        return (StageTimes(**{f: v[rows] for f, v in st.items()}), pa[rows], ex[rows],
                ActivationTerms(**{f: v[rows] for f, v in ac.items()}))
    first = blocks[int(used[0])]
    st_out = {f: np.empty(n, np.float64) for f in first[0]}
    ac_out = {f: np.empty(n, np.float64) for f in first[3]}
    pa_out = np.empty(n, np.result_type(*(blocks[int(u)][1].dtype for u in used)))
    ex_out = np.empty(n, np.float64)
    for u in used.tolist():
        sel = np.flatnonzero(where[:, 0] == u)
        rows = where[sel, 1]
        st, pa, ex, ac = blocks[u]
        for f, v in st.items():
            st_out[f][sel] = v[rows]
        for f, v in ac.items():
            ac_out[f][sel] = v[rows]
        pa_out[sel] = pa[rows]
        ex_out[sel] = ex[rows]
    return StageTimes(**st_out), pa_out, ex_out, ActivationTerms(**ac_out)

