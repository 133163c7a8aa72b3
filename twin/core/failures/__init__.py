"""Failure scenarios: what each failure costs a training job, and the fleet's goodput.

Pure domain code (standard library + numpy + PyYAML), like the rest of ``twin.core``:

- :mod:`.components` — the contract plugins describe their hardware with
  (``ComponentGroup``, ``FailureMode``, ``Impact``);
- :mod:`.rates` — default failure rates from the published Llama 3 interruption counts
  (``validation/reference/failures.yaml``) and other fleets;
- :mod:`.spec` — the ``failures:`` section of a scenario file (overrides, injections);
- :mod:`.inventory` — the components every cluster has (GPUs, hosts, the job's software);
- :mod:`.fabric` — fat-tree component groups and failure modes shared by the IB/RoCE plugins;
- :mod:`.impact` — degraded hierarchies/scenarios evaluated through the performance model,
  and the job's outcome (continue degraded, restart, shrink);
- :mod:`.goodput` — Young/Daly checkpoint interval and effective training time;
- :mod:`.montecarlo` — event simulation over a horizon (spares, overlapping failures);
- :mod:`.analysis` — ties it together: per-class costs, ranking, pairs, redundancy.
"""
