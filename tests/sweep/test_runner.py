"""The sweep engine with the inline executor: events, cancel, batching, merging."""

from __future__ import annotations

import threading

import numpy as np

from twin.sweep.job import Job
from twin.sweep.reduce import SweepResult, nrows
from twin.sweep.runner import Finished, InlineExecutor, Progress, events, run_job, sweep_job
from twin.sweep.spec import parse_spec

SPEC = {
    "name": "runner",
    "base": {"cluster": {"system": "DGX-H100", "num_gpus": 256}, "model": "llama3.1-70b", "plan": {"gbs": 512}},
    "axes": [{"path": "cluster.num_gpus", "values": [128, 256, 512]},
             {"path": "plan.tp", "values": [2, 4, 8]}, {"path": "plan.pp", "values": [1, 2, 4]},
             {"path": "plan.vp", "values": [1, 2, 5]}, {"path": "plan.mbs", "values": [1, 2]},
             {"path": "plan.recompute", "values": ["none", "full"]},
             {"path": "plan.optimizer_sharding", "values": ["distributed_optimizer", "fsdp"]}],
    "objective": {"metric": "tokens_per_s", "top": 7},
    "keep_rows": True,
}


def job(engine, **over) -> Job:
    return sweep_job(parse_spec({**SPEC, **over}), engine)


def test_events_stream_progress_then_the_result(engine):
    j = job(engine)
    seen = list(events(j, InlineExecutor(engine), batch_points=100))
    progress = [e for e in seen if isinstance(e, Progress)]
    assert isinstance(seen[-1], Finished) and not any(isinstance(e, Finished) for e in seen[:-1])
    assert [p.done for p in progress] == sorted(p.done for p in progress)
    assert progress[-1].done == j.total == 648 and progress[-1].batches_done == progress[-1].batches_total == 7
    result = seen[-1].result
    assert result.done == 648 and not result.cancelled
    assert result.feasible + result.infeasible == 648
    assert progress[-1].best is not None and progress[-1].best["tokens_per_s"] == result.top["tokens_per_s"][0]


def test_every_point_exactly_once_and_batching_does_not_matter(engine):
    a = run_job(job(engine), engine=engine, executor="inline", batch_points=53)
    b = run_job(job(engine), engine=engine, executor="inline", batch_points=1000)
    assert list(a.rows["point_id"]) == list(range(648))
    assert a.counts == b.counts and a.feasible == b.feasible
    for k in a.rows:
        x, y = a.rows[k], b.rows[k]
        assert np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), k
    for k in a.top:
        assert np.array_equal(a.top[k], b.top[k], equal_nan=a.top[k].dtype.kind == "f"), k
    # the top rows are the best feasible rows of the full table, in order
    ok = a.rows["feasible"]
    best = np.sort(a.rows["tokens_per_s"][ok])[::-1][:7]
    assert np.array_equal(a.top["tokens_per_s"], best)
    assert nrows(a.pareto) >= 1 and a.pareto["tokens_per_s"].max() == best[0]


def test_the_pareto_front_without_rows_is_the_front_of_every_row(engine):
    """Without keep_rows a batch builds rows only for candidates (top N, Pareto): the front
    (throughput vs the step's average power, which differs from point to point when the
    GPUs wait at a lower power) is the same."""
    from twin.sweep.reduce import pareto_rows

    base = {**SPEC["base"], "cluster": {**SPEC["base"]["cluster"], "power": {"gpu_idle_w": 100.0}}}
    full = run_job(job(engine, base=base), engine=engine, executor="inline", batch_points=1000)
    lean = run_job(job(engine, base=base, keep_rows=False), engine=engine, executor="inline", batch_points=1000)
    assert full.feasible > 4 * 7 + 64                    # enough points that candidates are pruned
    assert len(np.unique(full.rows["power_kw"][full.rows["feasible"]])) > 50
    want = pareto_rows(full.rows)
    assert list(lean.pareto["point_id"]) == list(want["point_id"]) == list(full.pareto["point_id"])


def test_cancel_stops_the_inline_sweep(engine):
    cancel = threading.Event()
    j = job(engine)
    out = None
    for ev in events(j, InlineExecutor(engine), cancel=cancel, batch_points=50):
        if isinstance(ev, Progress) and ev.batches_done == 2:
            cancel.set()
        if isinstance(ev, Finished):
            out = ev.result
    assert out is not None and out.cancelled
    assert out.done == 100 and len(out.batches) == 2


def test_closing_the_stream_early_stops_work(engine):
    j = job(engine)
    stream = events(j, InlineExecutor(engine), batch_points=50)
    first = next(stream)
    assert isinstance(first, Progress) and first.done == 50
    stream.close()  # a gRPC client that went away


def test_a_batch_seen_twice_counts_once(engine):
    j = job(engine, keep_rows=False)
    r = run_job(j, engine=engine, executor="inline", batch_points=648)
    again = SweepResult(name="x", total=648, metric=j.metric, order=j.order, top_n=j.top)
    from twin.sweep.job import Worker

    w = Worker(j, engine)
    b0 = w.run(0, 0, 300)
    b1 = w.run(1, 300, 648)
    assert again.add(b0) and again.add(b1) and not again.add(b0)  # a retried batch arriving late
    assert again.done == 648 and again.counts == r.counts and again.feasible == r.feasible
    assert np.array_equal(again.top["point_id"], r.top["point_id"])
