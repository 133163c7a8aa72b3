"""The sweep engine with the inline executor: events, cancel, batching, merging."""

from __future__ import annotations

import itertools
import threading

import numpy as np

from twin.sweep.job import Job
from twin.sweep.reduce import SweepResult, nrows
from twin.sweep.runner import (
    MAX_BATCH_POINTS,
    MIN_GUIDED_POINTS,
    Finished,
    InlineExecutor,
    Progress,
    events,
    plan_batches,
    run_job,
    sweep_job,
)
from twin.sweep.sweep_spec import parse_spec

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


def test_equal_step_times_rank_the_plan_with_more_memory_free_first():
    """Issue 12 item 5: a 78 GiB plan no longer ranks above a 51 GiB one of the same step time."""
    from twin.sweep.reduce import top_rows

    rows = {"point_id": np.array([0, 1, 2, 3]), "feasible": np.array([True, True, True, False]),
            "step_time_s": np.array([2.0, 2.0, 1.5, 1.0]), "memory_gib": np.array([78.0, 51.0, 70.0, 10.0])}
    top = top_rows(rows, "step_time_s", "min", 3)
    assert list(top["point_id"]) == [2, 1, 0]                 # fastest, then the tie by memory
    rows["memory_gib"] = np.array([51.0, 51.0, 70.0, 10.0])
    assert list(top_rows(rows, "step_time_s", "min", 3)["point_id"]) == [2, 0, 1]   # then by point id
    assert list(top_rows(rows, "memory_gib", "min", 2)["point_id"]) == [0, 1]


def test_parallel_batches_cover_every_point_once_largest_first():
    total, workers = 1_036_800, 2
    batches = plan_batches(total, workers)
    assert [b[0] for b in batches] == list(range(len(batches)))
    assert batches[0][1] == 0 and batches[-1][2] == total
    assert all(a[2] == b[1] for a, b in itertools.pairwise(batches))  # contiguous, no overlap
    sizes = [stop - start for _, start, stop in batches]
    assert sizes == sorted(sizes, reverse=True)
    assert max(sizes) <= MAX_BATCH_POINTS and min(sizes[:-1]) >= MIN_GUIDED_POINTS
    # Guided self-scheduling: each batch is the points left over the workers (within the bounds).
    done = 0
    for size in sizes[:-1]:
        assert size == min(MAX_BATCH_POINTS, max(MIN_GUIDED_POINTS, -(-(total - done) // workers)))
        done += size
    assert len(batches) == 8
