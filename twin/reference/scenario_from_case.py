"""A training case (``twin-reference-cases/v1``) as a :class:`Scenario`: the cluster, the
model as the run used it, the parallel degrees reconciled with the GPU count, the plan
fields the case states, and the settings of the knobs it leaves for the twin to choose
(:class:`~twin.reference.knob_choice.Knobs`).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from twin.core import schema
from twin.core.errors import SpecError
from twin.core.scenario_io import resolve_model, resolve_software
from twin.core.specs import MLA, Cluster, Hybrid, Model, MoE, Plan, Scenario, SlidingWindow
from twin.engine import Engine
from twin.reference.case_cluster import _cluster
from twin.reference.case_fields import _mapping, _number
from twin.reference.fit_policies import fit_policies
from twin.reference.knob_choice import Knobs
from twin.reference.plan_spellings import (
    _norm_precision,
    _norm_rank_order,
    _norm_recipe,
    _norm_recompute,
    _norm_schedule,
    _norm_sharding,
    precision_in_text,
)
from twin.reference.stack_defaults import _stack

# The settings the twin tries for an unstated micro-batch size and interleaving depth.
_SEARCH_MBS = (1, 2, 4, 8, 16)
_SEARCH_VP = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20)
# Plan fields a case may state in the twin's own spelling (twin extensions, CASES.md): used as given.
_AS_GIVEN = ("recipe", "recompute_modules", "overlap", "moe_dispatcher", "pp_first_layers", "pp_last_layers",
             "cp_comm_type")
# The interleaving depth a stated schedule fixes (interleaved: any vp > 1).
_SCHEDULE_VP = {"1f1b": 1, "zero_bubble_h1": 1, "zero_bubble_h2": 1, "dualpipe": 1, "zero_bubble_v": 2,
                "dualpipev": 2}


def _known(cls: type, data: Any) -> Any:
    """Keep the fields ``cls`` knows (reference files carry bookkeeping keys the twin ignores)."""
    if not isinstance(data, Mapping):
        return data
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in data.items() if k in names and v is not None}


def _model(engine: Engine, m: Mapping[str, Any]) -> dict[str, Any]:
    data = _known(Model, m)
    for key, cls in (("moe", MoE), ("mla", MLA), ("hybrid", Hybrid), ("sliding_window", SlidingWindow)):
        if key in data:
            data[key] = _known(cls, data[key])
    return data


def _whole(plan: Mapping[str, Any], key: str) -> int | None:
    """A plan degree or count of a training case: a whole number above 0, or None if absent
    (SpecError naming ``plan.KEY`` otherwise: 1.5 or "8" is not silently made 1 or 8).
    """
    return _number(plan.get(key), f"plan.{key}", integer=True)  # type: ignore[no-any-return]


# Mean tokens per example of the fine-tuning datasets a run may say it packs (source, family or
# notes: "SQuAD packed 4096"), for model.packed_doc_tokens when the case does not state it.
# SQuAD v1.1: the Hugging Face rajpurkar/squad train split is 79,346,108 bytes for 87,599
# examples = 906 B, less ~60 B of id/title/answer-offset fields, at ~4 characters per BPE
# token of English (OpenAI's tokenizer guide: 1 token ~ 4 characters): ~210 tokens.
_PACKED_DATASETS = {"squad": 210}
_PACKED = re.compile(r"\b(" + "|".join(_PACKED_DATASETS) + r")\b[^|;]*?(?<!not )(?<!non-)\bpacked\b", re.IGNORECASE)


def _case_text(case: Mapping[str, Any]) -> str:
    """The prose of a case the reader looks for facts in: its source, family and notes."""
    return " | ".join(str(case.get(k) or "") for k in ("source", "family", "notes"))


def _packed_doc_tokens(case: Mapping[str, Any]) -> tuple[int, str] | None:
    """(mean tokens per packed document, the dataset) where the case's text says it packs a
    dataset of ``_PACKED_DATASETS``; None otherwise.
    """
    hit = _PACKED.search(_case_text(case))
    return None if hit is None else (_PACKED_DATASETS[hit.group(1).lower()], hit.group(1))


# DeepEP is an expert-parallel communication library ("tailored for Mixture-of-Experts (MoE) and
# expert parallelism (EP)", deepseek-ai/DeepEP README): its kernels dispatch tokens to the
# experts of other EP ranks, so a run that names them is expert-parallel even where a table
# prints no EP degree. NeMo AutoModel's performance summary prints EP as "-" for its two
# GPT-OSS rows (read as ep 1) while their benchmark configs, which name DeepEP, set ep_size to
# the whole data-parallel group (examples/benchmark/configs/gptoss_20b_te_deepep.yaml: 8 on 8
# GPUs; gptoss_120b_te_deepep.yaml: 64 on 64). So an MoE case with ep 1 whose text names
# DeepEP is read with the largest EP the plan admits: the largest divisor of dp that divides
# the routed experts (their greatest common divisor).
_DEEPEP = re.compile(r"\bdeep-?ep\b", re.IGNORECASE)


def _deepep_ep(case: Mapping[str, Any], experts: int, dp: int) -> int | None:
    """The EP degree of an MoE case published with ep 1 whose text names DeepEP (see
    ``_DEEPEP``); None where its text does not name it or no EP above 1 fits.
    """
    if not _DEEPEP.search(_case_text(case)):
        return None
    best = math.gcd(dp, experts)  # the largest divisor of dp that divides the experts
    return best if best > 1 else None


def training_scenario(engine: Engine, case: Mapping[str, Any]) -> tuple[Scenario, Knobs, list[str]]:
    """The scenario of one training case, and the knobs left for the twin to choose.

    Built in steps, in the order they read the case (a case with several bad fields is
    refused naming the first): the cluster, the model as the run used it, the parallel
    degrees, the plan fields the case states, then the settings of the knobs it leaves open.
    """
    notes: list[str] = []
    cid = case.get("id", "?")
    cluster = _cluster(engine, case.get("cluster") or {}, notes, "cluster")
    stated_model = _mapping(case.get("model"), "model")
    model = resolve_model(_model(engine, stated_model), engine.catalog)
    stack, stack_name, defaults = _stack(engine, case)
    model = _model_as_run(case, stated_model, model, defaults, notes)
    p = dict(_mapping(case.get("plan"), "plan"))
    # The normaliser fills mbs and vp with mechanical placeholders (gbs/dp, 1) when a source
    # is silent, so those count as unstated; other assumed plan fields (recompute,
    # precision, sharding) come from the source's prose and are used as given.
    assumed = {a.split(".", 1)[1] for a in case.get("assumed") or [] if a.startswith("plan.")} & {"mbs", "vp",
                                                                                                  "recompute"}
    degrees = _degrees(case, p, model, cluster.num_gpus, notes)
    plan_kwargs = _stated_plan(case, p, degrees, cluster, notes)
    knobs = _knob_options(p, assumed, degrees, model, plan_kwargs, defaults, stack_name, notes)
    plan_kwargs.update(mbs=knobs.mbs[0], recompute=knobs.recompute[0], vp=knobs.vp[0])
    if len(knobs.vp) == 1:
        _embedding_loss_layout(plan_kwargs, model.layers, notes)
    plan = schema.load(Plan, plan_kwargs, "plan")
    software = resolve_software(stack, engine.catalog)
    scn = Scenario(cluster=cluster, model=model, plan=plan, name=str(cid), software=software)
    return scn, knobs, notes


def _model_as_run(case: Mapping[str, Any], stated_model: Mapping[str, Any], model: Model,
                  defaults: Mapping[str, Any], notes: list[str]) -> Model:
    """``model`` with what the case's text or its stack says of the run where the case does
    not state it: packed documents (``_packed_doc_tokens``) and the stack's MoE routing.
    """
    packed = _packed_doc_tokens(case) if stated_model.get("packed_doc_tokens") is None else None
    if packed is not None and packed[0] < model.seq_len:
        model = dataclasses.replace(model, packed_doc_tokens=packed[0])
        notes.append(f"model.packed_doc_tokens not stated: {packed[0]} ({packed[1]} packed, as the case says)")
    stated_moe = stated_model.get("moe")
    if (model.moe is not None and defaults.get("moe_routing")
            and not (isinstance(stated_moe, Mapping) and stated_moe.get("routing") is not None)):
        model = dataclasses.replace(model, moe=dataclasses.replace(model.moe, routing=defaults["moe_routing"]))
        notes.append(f"model.moe.routing not published: {defaults['moe_routing']} (its stack's published runs)")
    return model


@dataclass(frozen=True)
class _Degrees:
    """A training case's parallel degrees and global batch (sequences), reconciled with its GPUs."""

    tp: int
    pp: int
    cp: int
    ep: int
    dp: int
    gbs: int


def _degrees(case: Mapping[str, Any], p: Mapping[str, Any], model: Model, n: int, notes: list[str]) -> _Degrees:
    """The degrees as published, except: dp = GPUs / (tp*pp*cp) where they do not multiply out
    to the ``n`` GPUs (or cp takes the remaining factor where only the published dp splits the
    batch), and an MoE run published with ep 1 that names DeepEP gets its EP (``_deepep_ep``).
    """
    tp, pp, cp, ep = (_whole(p, k) or 1 for k in ("tp", "pp", "cp", "ep"))
    dp = _whole(p, "dp")
    if dp is None or tp * pp * cp * dp != n:
        if n % (tp * pp * cp):
            raise SpecError("plan", f"tp*pp*cp ({tp * pp * cp}) does not divide num_gpus ({n})")
        if dp is not None:
            notes.append(f"published dp={dp} gives tp*pp*cp*dp={tp * pp * cp * dp} != {n} GPUs; "
                         f"dp={n // (tp * pp * cp)} used")
        dp = n // (tp * pp * cp)
    gbs = _whole(p, "gbs")
    if gbs is None:
        raise SpecError("plan.gbs", "is required (the global batch in sequences)")
    published_dp = _whole(p, "dp")
    if gbs % dp and published_dp and gbs % published_dp == 0:
        # The derived dp cannot split the batch; the published dp can, so the mismatch is in
        # another degree. Context parallelism is the one that scales with GPUs at fixed batch
        # in long-sequence tables: give it the remaining factor.
        rest = n // (tp * pp * published_dp)
        if n % (tp * pp * published_dp) == 0 and model.seq_len % (2 * rest) == 0:
            notes[-1] = (f"published tp*pp*cp*dp = {tp * pp * cp * published_dp} != {n} GPUs and "
                         f"gbs={gbs} < GPUs/(tp*pp*cp); cp={rest} (published {cp}) with dp={published_dp} used")
            cp, dp = rest, published_dp
    if ep == 1 and model.moe is not None and not p.get("etp"):
        deepep = _deepep_ep(case, model.moe.experts, dp)
        if deepep is not None:
            ep = deepep
            notes.append(f"plan.ep published as 1 but the run names DeepEP (an expert-parallel library): "
                         f"ep={ep}, the largest that divides dp ({dp}) and the experts ({model.moe.experts})")
    return _Degrees(tp, pp, cp, ep, dp, gbs)


def _stated_plan(case: Mapping[str, Any], p: Mapping[str, Any], d: _Degrees, cluster: Cluster,
                 notes: list[str]) -> dict[str, Any]:
    """The plan fields the case states (precision and optimizer sharding assumed where it does
    not, with a note), in the twin's spelling, as keyword arguments of :class:`Plan`.
    """
    precision = _norm_precision(p.get("precision"))
    recipe = _norm_recipe(p.get("precision"))
    if precision is None:
        named = precision_in_text([("id", case.get("id")), ("family", case.get("family")),
                                   ("source", case.get("source")), ("notes", case.get("notes"))])
        if named is not None and cluster.gpu.supports(named[0]):
            precision, recipe = named[0], named[1]
            notes.append(f"precision not in the plan: {precision} as the case's {named[2]} names it")
        else:
            precision = "bf16" if cluster.gpu.supports("bf16") else "fp16"
            notes.append(f"precision not published: {precision} assumed")
    sharding = _norm_sharding(p.get("optimizer_sharding")) or "distributed_optimizer"
    if p.get("optimizer_sharding") is None:
        notes.append("optimizer sharding not published: distributed optimizer assumed")
    plan_kwargs: dict[str, Any] = {
        "gbs": d.gbs, "tp": d.tp, "pp": d.pp, "cp": d.cp, "ep": d.ep, "dp": d.dp, "precision": precision,
        "optimizer_sharding": sharding, "sequence_parallel": p.get("sequence_parallel"),
        "trainable": "lora" if case.get("kind") == "lora" else "full"}
    if recipe is not None and p.get("recipe") is None:
        plan_kwargs["recipe"] = recipe  # named by the precision's spelling (FP8-CS, MXFP8, NVFP4)
    if p.get("etp"):
        plan_kwargs["etp"] = _whole(p, "etp")
    if p.get("recompute_layers"):
        # Layers of a stage fully recomputed (Megatron --recompute-num-layers; torchtitan's
        # selective layer AC checkpoints every n-th layer): used as given, never dropped.
        plan_kwargs["recompute_layers"] = _whole(p, "recompute_layers")
    if p.get("rank_order"):
        plan_kwargs["rank_order"] = _norm_rank_order(p["rank_order"])
    schedule = _norm_schedule(p["schedule"]) if p.get("schedule") else None
    if schedule is not None:
        plan_kwargs["schedule"] = schedule
    for key in _AS_GIVEN:
        if p.get(key) is not None:
            plan_kwargs[key] = p[key]
    return plan_kwargs


def _embedding_loss_layout(plan_kwargs: dict[str, Any], layers: int, notes: list[str]) -> None:
    """The uneven layout of an interleaved plan whose layers do not split over its pp*vp virtual
    stages but do with the embedding and the loss counted as one layer each: Megatron-Core's
    --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split (an
    interleaved plan must otherwise split the layers evenly; Megatron-Core MoE Model Zoo,
    best_practice/Qwen3: 94 layers in pp 32 x vp 3). The first and the last stages then hold one
    layer fewer than the others (``pp_first_layers``, ``pp_last_layers``); set where the case
    states no layout of its own.
    """
    pp, vp = plan_kwargs["pp"], plan_kwargs["vp"]
    if vp <= 1 or plan_kwargs.get("pp_first_layers") or plan_kwargs.get("pp_last_layers"):
        return
    chunks = pp * vp
    if layers % chunks == 0 or (layers + 2) % chunks:
        return
    ends = (layers + 2) // pp - 1
    plan_kwargs.update(pp_first_layers=ends, pp_last_layers=ends)
    notes.append(f"{layers} layers do not split over pp*vp = {chunks} virtual stages; with the embedding and the "
                 f"loss counted as layers they do (Megatron-Core --account-for-embedding/loss-in-pipeline-split): "
                 f"the first and last stages hold {ends} layers, the others {ends + 1}")


def _knob_options(p: Mapping[str, Any], assumed: set[str], d: _Degrees, model: Model, plan_kwargs: dict[str, Any],
                  defaults: Mapping[str, Any], stack_name: str, notes: list[str]) -> Knobs:
    """The settings each knob may take: a stated one as given; an unstated (or ``assumed``) mbs,
    each of ``_SEARCH_MBS`` that divides the batch per rank; vp, the one a stated schedule fixes
    or each of ``_SEARCH_VP`` the layers allow; recompute, the stack's default (or each it has,
    ``recompute_fit``); FSDP resharding, the stack's default, else both. Sets the stack's
    resharding default in ``plan_kwargs`` (the stated plan: ``_stated_plan``).
    """
    schedule = plan_kwargs.get("schedule")
    per_rank = d.gbs // d.dp if d.gbs % d.dp == 0 else 0
    if per_rank == 0:
        raise SpecError("plan.gbs", f"gbs ({d.gbs}) is not a multiple of dp ({d.dp})")
    mbs = _whole(p, "mbs")
    if mbs is None or "mbs" in assumed:
        mbs_opts = tuple(b for b in _SEARCH_MBS if per_rank % b == 0) or (1,)
    else:
        mbs_opts = (mbs,)
    rc = _norm_recompute(p.get("recompute"))
    rc_opts: tuple[str, ...]
    if rc is None and defaults.get("recompute_fit"):
        # The run ran, so its recompute let it fit: the least that does (best_plan takes the
        # fastest that fits, and less recompute is faster).
        rc_opts = tuple(defaults["recompute_fit"])
        notes.append(f"recompute not published: the least that fits ({stack_name} practice)")
    elif rc is None:
        rc = defaults["recompute"]
        rc_opts = (str(rc),)
        notes.append(f"recompute not published: {rc} ({stack_name} default)")
    else:
        rc_opts = (str(rc),)
    vp = _whole(p, "vp")
    if schedule in _SCHEDULE_VP and (vp is None or "vp" in assumed):
        vp_opts: tuple[int, ...] = (_SCHEDULE_VP[schedule],)  # the schedule fixes it
    elif d.pp > 1 and (vp is None or "vp" in assumed):
        vp_opts = tuple(v for v in _SEARCH_VP if d.pp * v <= model.layers and (schedule != "interleaved" or v > 1)) \
            or (1,)
    else:
        vp_opts = (vp or 1,)
    reshard = p.get("fsdp_reshard_after_forward", defaults.get("fsdp_reshard_after_forward"))
    if reshard is not None:
        plan_kwargs["fsdp_reshard_after_forward"] = bool(reshard)
    reshard_opts = (False, True) if plan_kwargs["optimizer_sharding"] == "fsdp" and reshard is None else (None,)
    headroom = float(defaults.get("fit_headroom", 0.0)) if len(rc_opts) > 1 else 0.0
    recompute_open = _norm_recompute(p.get("recompute")) is None or "recompute" in assumed
    fit = fit_policies(stack_name, model, p, recompute_open, plan_kwargs)
    return Knobs(mbs_opts, rc_opts, vp_opts, reshard_opts, headroom=headroom, etp=_etp_options(p, d, model),
                 fit=fit)


def _etp_options(p: Mapping[str, Any], d: _Degrees, model: Model) -> tuple[int | None, ...]:
    """Expert tensor parallelism of an MoE case that does not state it: Megatron-Core's default
    (None: tp; megatron/training/arguments.py sets --expert-tensor-parallel-size to the tensor
    parallel size) or 1, which NVIDIA's MoE recipes set (Megatron-Core MoE Model Zoo and
    Megatron-Bridge recipes: ETP1 with TP > 1); the twin takes the fastest that fits and is valid.
    """
    if model.moe is None or d.tp == 1 or p.get("etp"):
        return (None,)
    return (None, 1)
