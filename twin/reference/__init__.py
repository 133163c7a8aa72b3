"""Read published reference cases (``twin-reference-cases/v1``, ``twin-reference-collectives/v1``)
and score the twin against them.

Format: validation/reference/CASES.md. A training case becomes a :class:`Scenario`:
fields the source did not state (``null``) or that the normaliser filled in (listed in
``assumed``) are, for the tuning knobs a publisher would have tuned (micro-batch size,
recomputation, virtual pipeline stages), chosen by the twin as the fastest setting that
fits in memory; structural degrees (tp, pp, cp, ep) and a stated pipeline schedule
(``plan.schedule``, which may fix vp) are used as given. A case whose
degrees do not multiply out to the GPU count gets dp = GPUs / (tp*pp*cp), with a note.
Cases without a step time or with a field the twin cannot represent are listed as
skipped with the reason, never dropped.

One job per module: ``reference_file`` (read a file, by its schema), ``case_fields`` (a
case's numbers and mappings, checked), ``case_cluster`` (its cluster), ``case_report``
(scores per case and family); training runs: ``stack_defaults`` (the software stack and
its defaults), ``plan_spellings`` (published spellings of plan fields),
``scenario_from_case`` (the scenario and its free knobs), ``knob_choice`` (the fastest
setting that fits), ``training_validation`` (scoring); collectives:
``collective_case_reader`` (op, placement, points), ``ep_workloads`` (expert dispatch),
``collective_validation`` (scoring).
"""

from twin.reference.case_report import MEMORY_MISS, CaseResult, Report
from twin.reference.collective_case_reader import (
    ASSUMED_NODES,
    COLLECTIVE_OPS,
    CollectiveSetup,
    collective_op,
    collective_setup,
)
from twin.reference.collective_validation import PEAK_MESSAGE_BYTES, validate_collectives
from twin.reference.ep_workloads import EPWorkload, ep_bytes, ep_predicted_GBps, ep_workload
from twin.reference.knob_choice import Knobs, best_plan
from twin.reference.reference_file import COLLECTIVES_SCHEMA, TRAINING_SCHEMA, validate_file
from twin.reference.scenario_from_case import training_scenario
from twin.reference.stack_defaults import STACK_DEFAULTS, case_software
from twin.reference.training_validation import validate_training

__all__ = ["ASSUMED_NODES", "COLLECTIVES_SCHEMA", "COLLECTIVE_OPS", "MEMORY_MISS", "PEAK_MESSAGE_BYTES",
           "STACK_DEFAULTS", "TRAINING_SCHEMA", "CaseResult", "CollectiveSetup", "EPWorkload", "Knobs", "Report",
           "best_plan", "case_software", "collective_op", "collective_setup", "ep_bytes", "ep_predicted_GBps",
           "ep_workload", "training_scenario", "validate_collectives", "validate_file", "validate_training"]
