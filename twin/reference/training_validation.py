"""Score the training cases of a ``twin-reference-cases/v1`` document: each case's
published step time (or the one its tokens/s implies) against the twin's for the plan it
chooses (``scenario_from_case``, ``knob_choice``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from twin.core.errors import TwinError
from twin.core.specs import Scenario
from twin.core.units import GIB
from twin.engine import Engine
from twin.reference.case_fields import _MALFORMED, _case_id, _listed_skips, _number, _section
from twin.reference.case_report import CaseResult, Report
from twin.reference.knob_choice import best_plan
from twin.reference.scenario_from_case import training_scenario


def _step_time(case: Mapping[str, Any]) -> float | None:
    """The published step time (measured, else derived); None if neither is stated (null); a
    SpecError naming the field for one that is not a finite number above 0.
    """
    for key in ("measured", "derived"):
        value = _section(case, key).get("step_time_s")
        if value is not None:
            return float(_number(value, f"{key}.step_time_s"))
    return None


# A throughput published instead of a step time, per GPU or for the whole job (tokens/s). Like
# the step time it depends on no FLOP-counting convention: one step processes gbs x seq_len
# tokens on num_gpus GPUs, so step time = gbs x seq_len / (tokens/s/GPU x num_gpus). (Model
# TFLOP/s and MFU follow each publisher's FLOP count and are not turned into a step time.)
_THROUGHPUTS = ("tokens_per_s_per_gpu", "tokens_per_s_total")


def _throughput(case: Mapping[str, Any]) -> tuple[str, float] | None:
    """The published tokens/s (which field, its value) of a case without a step time."""
    measured = _section(case, "measured")
    for key in _THROUGHPUTS:
        value = measured.get(key)
        if value is not None:
            return key, float(_number(value, f"measured.{key}"))
    return None


def _step_time_of_throughput(scn: Scenario, key: str, value: float) -> tuple[float, str]:
    """The step time a published throughput implies for ``scn`` (see ``_THROUGHPUTS``), and a note."""
    gpus = scn.cluster.num_gpus
    total = value * gpus if key == "tokens_per_s_per_gpu" else value
    step = scn.plan.gbs * scn.model.seq_len / total
    return step, (f"step time from measured.{key}: gbs {scn.plan.gbs} x seq_len {scn.model.seq_len} / "
                  f"{total:,.0f} tokens/s = {step:.4g} s")


def _measured_memory(case: Mapping[str, Any]) -> float | None:
    """The published peak memory per GPU, GiB (``measured.peak_memory_gib``: the most a GPU of
    the run held, as its framework reports it, e.g. torch.cuda.max_memory_reserved); None if not
    published. A malformed value is the case's error (SpecError naming the field).
    """
    value = _section(case, "measured").get("peak_memory_gib")
    return None if value is None else float(_number(value, "measured.peak_memory_gib"))


def validate_training(engine: Engine, data: Mapping[str, Any]) -> Report:
    """Score every case of a ``twin-reference-cases/v1`` document."""
    results, skipped = [], []
    for i, case in enumerate(data.get("cases") or []):
        if not isinstance(case, Mapping):
            skipped.append({"id": f"cases[{i}]",
                            "reason": f"malformed case: must be a mapping (got {type(case).__name__})"})
            continue
        cid = _case_id(case, f"cases[{i}]")
        try:
            measured = _step_time(case)
            throughput = _throughput(case) if measured is None else None
            memory = _measured_memory(case)
        except TwinError as err:
            skipped.append({"id": cid, "reason": f"malformed case: {err}"})
            continue
        if measured is None and throughput is None:
            skipped.append({"id": cid, "reason": "no step time (measured or derived) or tokens/s published"})
            continue
        try:
            scn, knobs, notes = training_scenario(engine, case)
            chosen, predicted, more = best_plan(engine, scn, knobs)
        except TwinError as err:
            skipped.append({"id": cid, "reason": f"cannot model: {err}"})
            continue
        except _MALFORMED as err:
            skipped.append({"id": cid, "reason": f"malformed case: {type(err).__name__}: {err}"})
            continue
        if measured is None and throughput is not None:
            measured, note = _step_time_of_throughput(scn, *throughput)
            notes.append(note)
        free = knobs.free()
        if free:
            notes.append("chosen by the twin (not published): " + ", ".join(free))
        pl = chosen.plan
        results.append(CaseResult(
            id=cid, family=str(case.get("family") or case.get("kind") or "?"), predicted=predicted,
            measured=measured, metric="step_time_s", notes=notes + more,
            plan={"tp": pl.tp, "pp": pl.pp, "vp": pl.vp, "dp": chosen.dp, "cp": pl.cp, "ep": pl.ep,
                  "etp": pl.expert_tp, "mbs": pl.mbs, "recompute": pl.recompute,
                  "recompute_layers": pl.recompute_layers, "recompute_modules": list(pl.recompute_modules),
                  "offload_activations": pl.offload.activations, "grad_reduce_dtype": pl.grad_reduce_dtype,
                  "precision": pl.precision, "recipe": pl.recipe},
            memory_predicted_gib=None if memory is None else engine.evaluate(
                chosen, validate=False, report=False).memory.total / GIB,
            memory_measured_gib=memory))
    skipped += _listed_skips(data)
    return Report(kind="training", cases=results, skipped=skipped)
