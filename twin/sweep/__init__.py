"""Scenario sweeps and plan search, inline or on Ray.

For a library user::

    from twin.sweep import run_sweep, search_plans, space_for
    result = run_sweep("examples/sweeps/fabrics-and-plans.yaml", engine=engine, executor="inline")
    plans = search_plans(engine, space_for(engine, "llama3.1-405b", "Meta-RoCE-H100", 16384, gbs=2048))

For a service (a streaming Sweep RPC): build the job first (a bad spec raises SpecError
naming the field, before any work), then stream events; set the cancel event (or close
the generator) when the client cancels, which cancels the Ray tasks::

    job = sweep_job(load_spec(mapping), engine, settings)      # or plan_job(space_for(...))
    for event in stream(job, engine=engine, executor=shared_executor, cancel=cancel):
        ...  # Progress(done, total, feasible, best, ...) then Finished(result)
"""

from twin.sweep.job import EngineSettings, Job
from twin.sweep.plansearch import PlanSearchResult, PlanSpace, plan_job, search_plans, space_for
from twin.sweep.reduce import SweepResult
from twin.sweep.runner import (
    Finished,
    InlineExecutor,
    Progress,
    SweepEvent,
    events,
    make_executor,
    run_job,
    run_sweep,
    stream,
    sweep_job,
)
from twin.sweep.sweep_spec import SweepSpec, load_spec, parse_spec

__all__ = [
    "EngineSettings", "Finished", "InlineExecutor", "Job", "PlanSearchResult", "PlanSpace", "Progress",
    "SweepEvent", "SweepResult", "SweepSpec", "events", "load_spec", "make_executor", "parse_spec", "plan_job",
    "run_job", "run_sweep", "search_plans", "space_for", "stream", "sweep_job",
]
