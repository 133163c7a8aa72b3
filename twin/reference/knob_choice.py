"""The knobs a training case leaves unstated (micro-batch size, recomputation, interleaving
depth, FSDP resharding, expert tensor parallelism) and the twin's choice of them: the fastest
setting that fits in memory (``best_plan``); where none does, the fastest memory policy the
case leaves open that makes it fit (``twin.reference.fit_policies``), and where even none of
those does, the setting that needs the least memory, never the one that needs the most.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass

from twin.core.errors import SpecError, TwinError
from twin.core.specs import Scenario, validate_scenario
from twin.engine import Engine
from twin.reference.case_report import MEMORY_MISS, POLICY_ASSUMED
from twin.reference.fit_policies import FitPolicy

# Shares of a stage's layers fully recomputed where only part of them need be
# (Megatron --recompute-num-layers: as many as memory needs).
_PARTIAL_SHARES = (0.25, 0.5, 0.75)


@dataclass
class Knobs:
    """The settings the twin may choose among for the knobs a training case leaves unstated
    (``training_scenario``), each tuple's first the scenario's own; ``best_plan`` picks one.
    ``etp``: expert tensor parallelism (None: the plan's own, tp). ``fit``: the memory policies
    tried where no setting of the others fits (``twin.reference.fit_policies``).
    """

    mbs: tuple[int, ...]
    recompute: tuple[str, ...]
    vp: tuple[int, ...]
    reshard: tuple[bool | None, ...] = (None,)   # None: as the plan says
    partial: bool = False
    headroom: float = 0.0   # share of HBM a chosen setting must leave free (the stack's fit_headroom)
    etp: tuple[int | None, ...] = (None,)
    fit: tuple[FitPolicy, ...] = ()

    def free(self) -> list[str]:
        """The knobs the twin chooses (more than one setting)."""
        return [k for k, opts in (("mbs", self.mbs), ("recompute", self.recompute), ("vp", self.vp),
                                  ("fsdp_reshard_after_forward", self.reshard), ("etp", self.etp)) if len(opts) > 1]


@dataclass(frozen=True)
class _Tried:
    """One evaluated candidate: whether it fits (with the headroom, at all), its step time and
    memory, and the scenario.
    """

    roomy: bool
    fits: bool
    step_s: float
    memory: float
    scenario: Scenario


def _candidates(scn: Scenario, knobs: Knobs, policy: FitPolicy | None) -> Iterator[Scenario]:
    """Every setting of the free knobs, under ``policy`` (None: as read)."""
    base = scn.plan if policy is None else dataclasses.replace(scn.plan, **policy.changes)
    partial = knobs.partial if policy is None else policy.partial
    layers_stage = math.ceil(scn.model.layers / scn.plan.pp)
    options = []
    recomputes = knobs.recompute if policy is None or "recompute" not in policy.changes else (base.recompute,)
    for rc in recomputes:
        if rc == "full" and partial:
            options += [("full", k) for k in sorted({max(1, math.ceil(layers_stage * f)) for f in _PARTIAL_SHARES})
                        if k < layers_stage]
        if not (policy is not None and policy.partial):
            options.append((rc, base.recompute_layers))
    for mbs, (rc, rl), vp, rs, etp in itertools.product(knobs.mbs, options, knobs.vp, knobs.reshard, knobs.etp):
        reshard = base.fsdp_reshard_after_forward if rs is None else rs
        yield dataclasses.replace(scn, plan=dataclasses.replace(
            base, mbs=mbs, recompute=rc, vp=vp, recompute_layers=rl, fsdp_reshard_after_forward=reshard,
            etp=base.etp if etp is None else etp))


def _try(engine: Engine, scn: Scenario, knobs: Knobs, policy: FitPolicy | None,
         errors: list[TwinError]) -> list[_Tried]:
    out = []
    for cand in _candidates(scn, knobs, policy):
        try:
            validate_scenario(cand)
            est = engine.evaluate(cand, validate=False, report=False)
        except TwinError as err:
            errors.append(err)
            continue
        out.append(_Tried(bool(est.memory.fits_leaving(knobs.headroom)), bool(est.fits), est.step_time_s,
                          float(est.memory.total), cand))
    return out


def _fastest_fitting(tried: list[_Tried]) -> _Tried | None:
    """The fastest that fits leaving the headroom, else the fastest that fits at all."""
    fitting = [t for t in tried if t.fits]
    if not fitting:
        return None
    return min(fitting, key=lambda t: (not t.roomy, t.step_s))


def best_plan(engine: Engine, scn: Scenario, knobs: Knobs) -> tuple[Scenario, float, list[str]]:
    """The fastest setting of the free knobs that fits in memory, leaving ``knobs.headroom`` of
    it free; where none fits, the fastest under the cheapest of ``knobs.fit`` that does (with a
    note naming it); where nothing fits, the setting that needs the least memory (with a note:
    a published, running plan that does not fit is a miss of the memory model).
    """
    errors: list[TwinError] = []
    tried = _try(engine, scn, knobs, None, errors)
    best = _fastest_fitting(tried)
    if best is not None:
        return best.scenario, best.step_s, []
    policy_of: dict[int, FitPolicy] = {}
    for policy in knobs.fit:
        for t in _try(engine, scn, knobs, policy, errors):
            policy_of[id(t)] = policy
            tried.append(t)
    best = _fastest_fitting(tried)
    if best is not None:
        policy = policy_of[id(best)]
        return best.scenario, best.step_s, [f"{POLICY_ASSUMED} {policy.name} assumed "
                                            f"(not published; the fastest of the settings the case leaves open "
                                            f"that fits)"]
    if not tried:
        first = errors[0] if errors else None
        if isinstance(first, SpecError):
            raise first  # a stated field breaks a rule whatever the free knobs: name it
        raise SpecError("plan", "no setting of the unstated knobs gives a valid plan")
    least = min(tried, key=lambda t: (t.memory, t.step_s))
    return least.scenario, least.step_s, [MEMORY_MISS]
