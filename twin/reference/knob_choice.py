"""The knobs a training case leaves unstated (micro-batch size, recomputation, interleaving
depth, FSDP resharding) and the twin's choice of them: the fastest setting that fits in
memory (``best_plan``).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass

from twin.core.errors import SpecError, TwinError
from twin.core.specs import Scenario, validate_scenario
from twin.engine import Engine
from twin.reference.case_report import MEMORY_MISS


@dataclass
class Knobs:
    """The settings the twin may choose among for the knobs a training case leaves unstated
    (``training_scenario``), each tuple's first the scenario's own; ``best_plan`` picks one.
    """

    mbs: tuple[int, ...]
    recompute: tuple[str, ...]
    vp: tuple[int, ...]
    reshard: tuple[bool | None, ...] = (None,)   # None: as the plan says
    partial: bool = False
    headroom: float = 0.0   # share of HBM a chosen setting must leave free (the stack's fit_headroom)


def best_plan(engine: Engine, scn: Scenario, knobs: Knobs) -> tuple[Scenario, float, list[str]]:
    """The fastest setting of the free knobs that fits in memory, leaving ``knobs.headroom`` of
    it free (else the fastest, with a note where it does not fit at all: a published, running
    plan that does not fit is a miss of the memory model).
    """
    best: tuple[bool, float, Scenario, bool] | None = None
    first_error: TwinError | None = None
    layers_stage = math.ceil(scn.model.layers / scn.plan.pp)
    options = []
    for rc in knobs.recompute:
        if rc == "full" and knobs.partial:
            # Megatron --recompute-num-layers: recompute only as many layers as memory needs.
            options += [("full", k) for k in sorted({max(1, math.ceil(layers_stage * f)) for f in (0.25, 0.5, 0.75)})
                        if k < layers_stage]
        options.append((rc, scn.plan.recompute_layers))
    for mbs, (rc, rl), vp, rs in itertools.product(knobs.mbs, options, knobs.vp, knobs.reshard):
        reshard = scn.plan.fsdp_reshard_after_forward if rs is None else rs
        cand = dataclasses.replace(scn, plan=dataclasses.replace(scn.plan, mbs=mbs, recompute=rc, vp=vp,
                                                                 recompute_layers=rl,
                                                                 fsdp_reshard_after_forward=reshard))
        try:
            validate_scenario(cand)
            est = engine.evaluate(cand, validate=False, report=False)
        except TwinError as err:
            first_error = first_error or err
            continue
        # Ranked by fitting with the stack's headroom; a memory miss is only not fitting at all.
        roomy = bool(est.memory.fits_leaving(knobs.headroom))
        key = (not roomy, est.step_time_s)
        if best is None or key < (not best[0], best[1]):
            best = (roomy, est.step_time_s, cand, bool(est.fits))
    if best is None:
        if isinstance(first_error, SpecError):
            raise first_error  # a stated field breaks a rule whatever the free knobs: name it
        raise SpecError("plan", "no setting of the unstated knobs gives a valid plan")
    notes = []
    if not best[3]:
        notes.append(MEMORY_MISS)
    return best[2], best[1], notes
