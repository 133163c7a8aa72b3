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
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

from twin.core import schema
from twin.core.collectives import OPS, bus_factor, collective_cost, dedup_dispatch_cost, domains_per_token
from twin.core.errors import SpecError, TwinError
from twin.core.scenario_io import read_mapping, resolve_gpu, resolve_model, resolve_software
from twin.core.specs import (
    MLA,
    Cluster,
    HostCpu,
    Hybrid,
    Model,
    MoE,
    Plan,
    ScaleOut,
    ScaleUp,
    Scenario,
    SlidingWindow,
    validate_scenario,
)
from twin.core.topology import place_group
from twin.engine import Engine

TRAINING_SCHEMA = "twin-reference-cases/v1"
COLLECTIVES_SCHEMA = "twin-reference-collectives/v1"
# Message size assumed when a peak bus bandwidth is published without its size: peak
# figures come from the large-message end of nccl-tests sweeps (e.g. NVIDIA/nccl#1455
# "-b 2G -e 4G").
PEAK_MESSAGE_BYTES = 2 * 2**30
# Nodes assumed when a multi-node collective figure does not state its node count.
ASSUMED_NODES = 4
_FABRIC_ALIASES = {"unknown": "infiniband", "ethernet": "ethernet"}
_SEARCH_MBS = (1, 2, 4, 8, 16)
_SEARCH_VP = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20)
MEMORY_MISS = "memory-model miss: the published plan does not fit by the twin's count (predicted as published)"
# The software stack of a case (one rule for every case): its own ``software`` field when
# it has one, else the first of these that its family names (case-insensitive), else the
# default stack (megatron-core-te: NeMo, Megatron-Core and NVIDIA's performance recipes;
# Meta's Llama 3 stack is not public and is taken as that default too).
_SOFTWARE_BY_FAMILY = (("automodel", "nemo-automodel"), ("torchtitan", "pytorch-fsdp2"), ("fsdp2", "pytorch-fsdp2"),
                       ("deepspeed", "megatron-deepspeed"), ("nemo megatron", "nemo-megatron"))
# Runs published from the Megatron-LM code base before Megatron-Core and Transformer Engine
# (a family dated 2019-2022: Shoeybi et al. 2019, Narayanan et al. 2021, Korthikanti et al.
# 2022, the README tables of 2020-2021) ran its eager Apex kernels: megatron-deepspeed.
_PRE_TE_YEAR = re.compile(r"\b20(19|20|21|22)\b")
# What a stack does with a knob a source leaves unstated (its documented default; one rule
# for every case, by the case's software preset). Two knobs have no usable default, and an
# unstated one is the twin's choice (the fastest that fits): mbs (Megatron's
# --micro-batch-size is required) and, with pipelining, the interleaving depth (tuned
# pipelined runs interleave, e.g. Llama 3 §3.3.2, Narayanan et al. 2021, but sources rarely
# give the depth).
# - Megatron-Core (--recompute-granularity None): no recomputation;
# - the Megatron-LM code base of 2019-2022 (megatron-deepspeed): its published GPT scripts
#   (examples/pretrain_gpt*.sh) pass --checkpoint-activations, i.e. full recomputation
#   (Narayanan et al. 2021 count its FLOPs);
# - NeMo Megatron of 2022-2023 (nemo-megatron: its GPT-3 configs set
#   activations_checkpoint_granularity: null): no recomputation;
# - torchtitan (activation_checkpoint.mode default "selective");
# - NeMo AutoModel (activation_checkpointing: false in its benchmark configs);
# FSDP's reshard_after_forward: PyTorch fully_shard's default (True) on the PyTorch stacks
# (torchtitan, NeMo AutoModel); the Megatron stacks document none (and Meta's Llama 3 stack,
# read as the default stack, does not reshard), so there it is the twin's choice like mbs and vp.
STACK_DEFAULTS: dict[str, dict[str, Any]] = {
    "megatron-core-te": {"recompute": "none"},
    "megatron-core-te-cudagraphs": {"recompute": "none"},
    "megatron-deepspeed": {"recompute": "full"},
    "nemo-megatron": {"recompute": "none"},
    "pytorch-fsdp2": {"recompute": "selective", "fsdp_reshard_after_forward": True},
    # AutoModel's default is no activation checkpointing; its benchmark configs turn it on model
    # by model where memory needs it. "recompute_fit" lists the settings the stack has, least
    # first (its activation_checkpointing switches whole layers: none or full; the first is its
    # default), and the reader takes the least that fits leaving "fit_headroom" of HBM free. By
    # the twin's count the AutoModel runs that go without use 60-67 of 80 GiB (75-83%); the two
    # Qwen2.5-32B LoRA runs that keep it on would use 72-77 GiB (90-96%) without it. The 10% is
    # set from those six runs (in-sample), the round figure between them, and is the headroom
    # the plan search offers (docs/sweeps.md). On the 14 AutoModel runs of validation/reference
    # whose config states it, the rule gives back all 14 (12 without the headroom):
    # tests/validation/test_reference_validation.py.
    # Its published performance tables are run with mock data and the fake balanced gate
    # (performance-summary.mdx: "fake balanced gate for MoE"; FakeBalancedGate in
    # nemo_automodel/components/moe/layers.py gives token t the experts (t*k + j) mod E): an
    # MoE run of that stack with no routing stated is read as model.moe.routing: contiguous.
    "nemo-automodel": {"recompute_fit": ("none", "full"), "fit_headroom": 0.10,
                       "fsdp_reshard_after_forward": True, "moe_routing": "contiguous"},
}


@dataclass
class CaseResult:
    """One scored case."""

    id: str
    family: str
    predicted: float
    measured: float
    metric: str
    notes: list[str] = field(default_factory=list)
    plan: dict[str, Any] = field(default_factory=dict)
    points: list[dict[str, Any]] = field(default_factory=list)
    nodes: int | None = None  # nodes the measured group spans (collectives); None: not recorded

    @property
    def error_pct(self) -> float:
        """Signed percentage error of the prediction."""
        return (self.predicted - self.measured) / self.measured * 100.0


@dataclass
class Report:
    """All scored and skipped cases of one file."""

    kind: str
    cases: list[CaseResult]
    skipped: list[dict[str, str]]

    def summary(self) -> dict[str, Any]:
        """Count, median and p90 of absolute % error, overall and per family."""
        def stats(rows: Iterable[CaseResult]) -> dict[str, Any]:
            errs = sorted(abs(r.error_pct) for r in rows)
            return {"n": len(errs), "median_abs_error_pct": _quantile(errs, 0.5),
                    "p90_abs_error_pct": _quantile(errs, 0.9)}

        families: dict[str, list[CaseResult]] = {}
        for r in self.cases:
            families.setdefault(r.family, []).append(r)
        out = stats(self.cases)
        out["skipped"] = list(self.skipped)
        out["memory_misses"] = [r.id for r in self.cases if MEMORY_MISS in r.notes]
        out["families"] = {f: stats(rows) for f, rows in sorted(families.items())}
        if any(r.nodes is not None for r in self.cases):
            out["multi_node"] = stats(r for r in self.cases if (r.nodes or 0) > 1)
        return out

    def to_dict(self) -> dict[str, Any]:
        """The JSON form printed by ``twin validate --json``."""
        key_p, key_m = (("predicted_step_time_s", "measured_step_time_s") if self.kind == "training"
                        else ("predicted_busbw_GBps", "measured_busbw_GBps"))
        cases = []
        for r in self.cases:
            row: dict[str, Any] = {"id": r.id, "family": r.family, key_p: r.predicted, key_m: r.measured,
                                   "error_pct": r.error_pct}
            if r.notes:
                row["notes"] = r.notes
            if r.plan:
                row["plan"] = r.plan
            if r.points:
                row["points"] = r.points
            if r.nodes is not None:
                row["nodes"] = r.nodes
            cases.append(row)
        return {"kind": self.kind, "cases": cases, "summary": self.summary()}


def _quantile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated quantile (numpy's default); NaN for no values."""
    if not sorted_values:
        return float("nan")
    if len(sorted_values) == 1:
        return sorted_values[0]
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


# ------------------------------------------------------------------ conversions
def _number(value: Any, path: str, *, integer: bool = False, minimum: float = 0.0) -> Any:
    """``value`` as a finite number (an int if ``integer``) above ``minimum``, or None if null;
    a SpecError naming ``path`` otherwise (a bad field is that case's error, not the file's).
    """
    if value is None:
        return None
    # (an int of any size is finite; math.isfinite would overflow converting it to a float)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            (isinstance(value, float) and not math.isfinite(value)):
        raise SpecError(path, f"must be a number (got {_shown(value)})")
    if integer:
        if value != int(value):
            raise SpecError(path, f"must be a whole number (got {_shown(value)})")
        value = int(value)
    if value <= minimum:
        raise SpecError(path, f"must be > {minimum:g} (got {_shown(value)})")
    if value > _LARGEST:
        raise SpecError(path, f"must be at most {_LARGEST:g} (got {_shown(value)})")
    return value


# No field of a reference case comes near this (the largest are message sizes, ~1e11 bytes);
# past it a number is a typo or an attack, refused naming its field before it reaches arithmetic.
_LARGEST = 1e18


def _shown(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters; a huge integer by its size (Python refuses to
    print one of over 4,300 digits, and a 400-digit one is not worth echoing whole).
    """
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        return f"an integer of about {int(value.bit_length() * math.log10(2)) + 1} digits"
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


# A malformed value that no check names (a type the reading code does not expect): that case's
# error ("malformed case"), like a SpecError, never the file's.
_MALFORMED = (TypeError, ValueError, AttributeError, ArithmeticError)


def _mapping(value: Any, path: str) -> Mapping[str, Any]:
    """``value`` if it is a mapping, {} if null, else a SpecError naming ``path``."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SpecError(path, f"must be a mapping (got {type(value).__name__})")
    return value


# Scale-out fields a reference case may state beyond fabric and rates (CASES.md,
# "Fabric fields"), with the spellings publishers use; they map onto ScaleOut.
_TOPOLOGY_SPELLINGS = {"railoptimized": "rail_optimized", "railoptimised": "rail_optimized", "rail": "rail_optimized",
                       "railaligned": "rail_optimized", "fattree": "fat_tree", "clos": "fat_tree"}
_ROUTING_SPELLINGS = {"ecmp": False, "static": False, "adaptive": True, "ar": True, "adaptiverouting": True}
_SCALE_OUT_PASSTHROUGH = ("sharp", "adaptive_routing", "switch_radix", "tiers", "gpus_per_leaf", "tier_spans",
                          "latency_us", "achievable_fraction", "params")
_SCALE_OUT_READ = {"fabric", "gbps_per_gpu", "nics_per_node", "topology", "oversubscription", "routing",
                   *_SCALE_OUT_PASSTHROUGH}


def _ratio(value: Any, path: str) -> float:
    """A taper as a number or a published ``"down:up"`` string (``"7:1"`` is 7)."""
    if isinstance(value, str) and ":" in value:
        down, _, up = value.partition(":")
        try:
            return float(down) / float(up)
        except (ValueError, ZeroDivisionError):
            raise SpecError(path, f"must be a number or 'down:up' (got {value!r})") from None
    return float(_number(value, path))


def _scale_out_extras(so: Mapping[str, Any], notes: list[str], path: str) -> dict[str, Any]:
    """The ScaleOut fields a case states beyond fabric and rates, normalised."""
    out: dict[str, Any] = {}
    topo = so.get("topology")
    if topo is not None:
        key = str(topo).lower().replace("-", "").replace("_", "").replace(" ", "")
        out["topology"] = _TOPOLOGY_SPELLINGS.get(key, str(topo))
    taper = so.get("oversubscription")
    if taper is not None:
        items = taper if isinstance(taper, (list, tuple)) else [taper]
        out["oversubscription"] = tuple(_ratio(v, f"{path}.oversubscription") for v in items)
    routing = so.get("routing")
    if routing is not None:
        key = str(routing).lower().replace("-", "").replace("_", "").replace(" ", "")
        if key not in _ROUTING_SPELLINGS:
            raise SpecError(f"{path}.routing", f"must be one of ecmp, static, adaptive (got {routing!r})")
        out["adaptive_routing"] = _ROUTING_SPELLINGS[key]
    for key in _SCALE_OUT_PASSTHROUGH:
        if so.get(key) is not None:
            out[key] = so[key]
    ignored = sorted(str(k) for k in so if k not in _SCALE_OUT_READ)
    if ignored:
        notes.append(f"{path} fields not read: {', '.join(ignored)}")
    return out


def _cluster(engine: Engine, c: Mapping[str, Any], notes: list[str], path: str,
             num_gpus: int | None = None) -> Cluster:
    c = _mapping(c, path)
    gpu = resolve_gpu(c.get("gpu"), engine.catalog, f"{path}.gpu")
    per_node = _number(c.get("gpus_per_node"), f"{path}.gpus_per_node", integer=True) or 8
    n = num_gpus or _number(c.get("num_gpus"), f"{path}.num_gpus", integer=True)
    if n is None:
        raise SpecError(f"{path}.num_gpus", "is required")
    su = _mapping(c.get("scale_up"), f"{path}.scale_up")
    fabric = str(su.get("fabric") or "nvlink")
    gen = None
    if fabric.startswith("nvlink"):
        gen = int(fabric[6:]) if fabric[6:].isdigit() else None
        fabric = "nvlink"
    domain = _number(su.get("domain_gpus"), f"{path}.scale_up.domain_gpus", integer=True) or per_node
    scale_up = ScaleUp(fabric=fabric, generation=gen, domain_gpus=domain)
    so = _mapping(c.get("scale_out"), f"{path}.scale_out")
    kind = _FABRIC_ALIASES.get(str(so.get("fabric") or "unknown"), str(so.get("fabric") or "infiniband"))
    if (so.get("fabric") or "unknown") == "unknown":
        notes.append("scale-out fabric not published: InfiniBand assumed")
    per_gpu = _number(so.get("gbps_per_gpu"), f"{path}.scale_out.gbps_per_gpu")
    nics = _number(so.get("nics_per_node"), f"{path}.scale_out.nics_per_node", integer=True)
    if per_gpu is None:
        per_gpu = 400.0 if gpu.generation in ("hopper", "blackwell") else 200.0
        if nics:  # e.g. "4x 200 Gb/s dual-port HCAs": rate per port not stated
            per_gpu = 200.0 * nics / per_node
        notes.append(f"scale-out rate per GPU not published: {per_gpu:g} Gb/s assumed")
    nic_gbps = float(per_gpu) * per_node / nics if nics else float(per_gpu)
    data = {"fabric": kind, "nics_per_node": nics, "nic_gbps": nic_gbps,
            **_scale_out_extras(so, notes, f"{path}.scale_out")}
    scale_out = schema.load(ScaleOut, data, f"{path}.scale_out")
    cpu = c.get("host_cpu")
    if cpu is not None and cpu not in get_args(HostCpu):
        raise SpecError(f"{path}.host_cpu", f"must be one of {', '.join(get_args(HostCpu))} (got {cpu!r})")
    return Cluster(gpu=gpu, num_gpus=int(n), gpus_per_node=per_node, scale_up=scale_up, scale_out=scale_out,
                   name=str(c.get("system") or ""), host_cpu=cpu)


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


def _norm_precision(value: Any) -> str | None:
    if value is None:
        return None
    v = str(value).lower()
    for key in ("fp4", "fp8", "bf16", "fp16", "tf32", "fp32"):
        if key in v:
            return key
    return v


def _norm_recompute(value: Any) -> str | None:
    if value is None:
        return None
    v = str(value).lower()
    if v in ("none", "false", "no", "off", "0"):
        return "none"
    if v in ("full", "uniform", "block", "true", "all"):
        return "full"
    return v


def _norm_sharding(value: Any) -> str | None:
    if value is None:
        return None
    v = str(value).lower().replace("-", "").replace("_", "")
    return {"none": "none", "distributedoptimizer": "distributed_optimizer", "zero1": "zero1", "zero2": "zero2",
            "zero3": "zero3", "fsdp": "fsdp", "fsdp1": "fsdp", "fsdp2": "fsdp", "hsdp": "fsdp"}.get(v, str(value))


@dataclass
class _Knobs:
    mbs: tuple[int, ...]
    recompute: tuple[str, ...]
    vp: tuple[int, ...]
    reshard: tuple[bool | None, ...] = (None,)   # None: as the plan says
    partial: bool = False
    headroom: float = 0.0   # share of HBM a chosen setting must leave free (the stack's fit_headroom)


def case_software(case: Mapping[str, Any]) -> str | Mapping[str, Any]:
    """The software stack of a case, by the one rule above (a preset name or a mapping)."""
    stated = case.get("software")
    if stated:
        if not isinstance(stated, str | Mapping):
            raise SpecError("software", f"must be a software preset name or a mapping (got {type(stated).__name__})")
        return stated
    family = str(case.get("family") or "").lower()
    for word, preset in _SOFTWARE_BY_FAMILY:
        if word in family:
            return preset
    if _PRE_TE_YEAR.search(family):
        return "megatron-deepspeed"
    return "megatron-core-te"


def _norm_rank_order(value: Any) -> str:
    """A published rank order (``[TP, CP, PP, DP]``, ``tp-cp-pp-dp``) in the twin's spelling."""
    if isinstance(value, list | tuple):
        parts = list(value)
    else:
        parts = str(value).replace(",", "-").replace(" ", "").strip("[]").split("-")
    spelled = "-".join(str(p).strip().lower() for p in parts if str(p).strip())
    return {"tp-cp-pp-dp": "tp-cp-pp-dp", "tp-pp-dp": "tp-cp-pp-dp", "tp-cp-ep-dp-pp": "tp-cp-ep-dp-pp",
            "tp-cp-dp-pp": "tp-cp-ep-dp-pp", "tp-dp-pp": "tp-cp-ep-dp-pp"}.get(spelled, spelled)


# Published spellings of pipeline schedules -> ``plan.schedule`` (ZB1P/ZB2P: the zero-bubble
# repository's names for ZB-H1/ZB-H2; "1f1b-interleaved": Megatron's interleaved 1F1B).
_SCHEDULE_SPELLINGS = {"1f1b": "1f1b", "interleaved": "interleaved", "interleaved1f1b": "interleaved",
                       "1f1binterleaved": "interleaved", "zbh1": "zero_bubble_h1", "zb1p": "zero_bubble_h1",
                       "zerobubbleh1": "zero_bubble_h1", "zbh2": "zero_bubble_h2", "zb2p": "zero_bubble_h2",
                       "zerobubbleh2": "zero_bubble_h2", "zbv": "zero_bubble_v", "zerobubblev": "zero_bubble_v",
                       "dualpipe": "dualpipe", "dualpipev": "dualpipev"}
# Plan fields a case may state in the twin's own spelling (twin extensions, CASES.md): used as given.
_AS_GIVEN = ("recipe", "recompute_modules", "overlap", "moe_dispatcher", "pp_first_layers", "pp_last_layers",
             "cp_comm_type")
# The interleaving depth a stated schedule fixes (interleaved: any vp > 1).
_SCHEDULE_VP = {"1f1b": 1, "zero_bubble_h1": 1, "zero_bubble_h2": 1, "dualpipe": 1, "zero_bubble_v": 2,
                "dualpipev": 2}


def _norm_schedule(value: Any) -> str:
    """A published pipeline schedule (``ZB-H1``, ``DualPipe``, ``interleaved 1F1B``) in the twin's spelling."""
    key = re.sub(r"[^a-z0-9]", "", str(value).lower())
    got = _SCHEDULE_SPELLINGS.get(key)
    if got is None:
        raise SpecError("plan.schedule", f"unknown pipeline schedule {value!r}; expected one of "
                                         + ", ".join(sorted(set(_SCHEDULE_SPELLINGS.values()))))
    return got


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


def _stack(engine: Engine, case: Mapping[str, Any]) -> tuple[str | Mapping[str, Any], str, Mapping[str, Any]]:
    """The case's software stack, its preset name, and its ``STACK_DEFAULTS`` (Megatron-Core's
    for a stack that has none).
    """
    stack = case_software(case)
    name = stack if isinstance(stack, str) else str(stack.get("preset", "megatron-core-te"))
    return stack, name, STACK_DEFAULTS.get(engine.catalog.canonical("software", name),
                                           STACK_DEFAULTS["megatron-core-te"])


def training_scenario(engine: Engine, case: Mapping[str, Any]) -> tuple[Scenario, _Knobs, list[str]]:
    """The scenario of one training case, and the knobs left for the twin to choose."""
    notes: list[str] = []
    cid = case.get("id", "?")
    cluster = _cluster(engine, case.get("cluster") or {}, notes, "cluster")
    stated_model = _mapping(case.get("model"), "model")
    model = resolve_model(_model(engine, stated_model), engine.catalog)
    stack, stack_name, defaults = _stack(engine, case)
    packed = _packed_doc_tokens(case) if stated_model.get("packed_doc_tokens") is None else None
    if packed is not None and packed[0] < model.seq_len:
        model = dataclasses.replace(model, packed_doc_tokens=packed[0])
        notes.append(f"model.packed_doc_tokens not stated: {packed[0]} ({packed[1]} packed, as the case says)")
    stated_moe = stated_model.get("moe")
    if (model.moe is not None and defaults.get("moe_routing")
            and not (isinstance(stated_moe, Mapping) and stated_moe.get("routing") is not None)):
        model = dataclasses.replace(model, moe=dataclasses.replace(model.moe, routing=defaults["moe_routing"]))
        notes.append(f"model.moe.routing not published: {defaults['moe_routing']} (its stack's published runs)")
    p = dict(_mapping(case.get("plan"), "plan"))
    # The normaliser fills mbs and vp with mechanical placeholders (gbs/dp, 1) when a source
    # is silent, so those count as unstated; other assumed plan fields (recompute,
    # precision, sharding) come from the source's prose and are used as given.
    assumed = {a.split(".", 1)[1] for a in case.get("assumed") or [] if a.startswith("plan.")} & {"mbs", "vp"}
    tp, pp, cp, ep = (_whole(p, k) or 1 for k in ("tp", "pp", "cp", "ep"))
    n = cluster.num_gpus
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
    precision = _norm_precision(p.get("precision"))
    if precision is None:
        precision = "bf16" if cluster.gpu.supports("bf16") else "fp16"
        notes.append(f"precision not published: {precision} assumed")
    sharding = _norm_sharding(p.get("optimizer_sharding")) or "distributed_optimizer"
    if p.get("optimizer_sharding") is None:
        notes.append("optimizer sharding not published: distributed optimizer assumed")
    plan_kwargs: dict[str, Any] = {
        "gbs": gbs, "tp": tp, "pp": pp, "cp": cp, "ep": ep, "dp": dp, "precision": precision,
        "optimizer_sharding": sharding, "sequence_parallel": p.get("sequence_parallel"),
        "trainable": "lora" if case.get("kind") == "lora" else "full"}
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
    per_rank = gbs // dp if gbs % dp == 0 else 0
    if per_rank == 0:
        raise SpecError("plan.gbs", f"gbs ({gbs}) is not a multiple of dp ({dp})")
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
    elif pp > 1 and (vp is None or "vp" in assumed):
        vp_opts = tuple(v for v in _SEARCH_VP if pp * v <= model.layers and (schedule != "interleaved" or v > 1)) \
            or (1,)
    else:
        vp_opts = (vp or 1,)
    reshard = p.get("fsdp_reshard_after_forward", defaults.get("fsdp_reshard_after_forward"))
    if reshard is not None:
        plan_kwargs["fsdp_reshard_after_forward"] = bool(reshard)
    reshard_opts = (False, True) if sharding == "fsdp" and reshard is None else (None,)
    plan_kwargs.update(mbs=mbs_opts[0], recompute=rc_opts[0], vp=vp_opts[0])
    plan = schema.load(Plan, plan_kwargs, "plan")
    software = resolve_software(stack, engine.catalog)
    scn = Scenario(cluster=cluster, model=model, plan=plan, name=str(cid), software=software)
    headroom = float(defaults.get("fit_headroom", 0.0)) if len(rc_opts) > 1 else 0.0
    return scn, _Knobs(mbs_opts, rc_opts, vp_opts, reshard_opts, headroom=headroom), notes


def best_plan(engine: Engine, scn: Scenario, knobs: _Knobs) -> tuple[Scenario, float, list[str]]:
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
            est = engine.model.evaluate(cand, validate=False, report=False)
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


def _step_time(case: Mapping[str, Any]) -> float | None:
    """The published step time (measured, else derived); None if neither is stated (null); a
    SpecError naming the field for one that is not a finite number above 0.
    """
    for key in ("measured", "derived"):
        value = _section(case, key).get("step_time_s")
        if value is not None:
            return float(_number(value, f"{key}.step_time_s"))
    return None


def _case_id(case: Mapping[str, Any], default: str) -> str:
    """A case's ``id`` as text (``default`` where it has none; a non-text id shown cut short)."""
    cid = case.get("id")
    if cid is None:
        return default
    return cid if isinstance(cid, str) else _shown(cid)


def _section(case: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """``case[key]`` where it is a mapping (``measured``, ``derived``), else empty: a case whose
    section is malformed publishes no figure there, and is skipped as such.
    """
    value = case.get(key)
    return value if isinstance(value, Mapping) else {}


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
        free = [k for k, opts in (("mbs", knobs.mbs), ("recompute", knobs.recompute), ("vp", knobs.vp),
                                  ("fsdp_reshard_after_forward", knobs.reshard)) if len(opts) > 1]
        if free:
            notes.append("chosen by the twin (not published): " + ", ".join(free))
        pl = chosen.plan
        results.append(CaseResult(
            id=cid, family=str(case.get("family") or case.get("kind") or "?"), predicted=predicted,
            measured=measured, metric="step_time_s", notes=notes + more,
            plan={"tp": pl.tp, "pp": pl.pp, "vp": pl.vp, "dp": chosen.dp, "cp": pl.cp, "ep": pl.ep, "mbs": pl.mbs,
                  "recompute": pl.recompute, "recompute_layers": pl.recompute_layers,
                  "precision": pl.precision}))
    skipped += _listed_skips(data)
    return Report(kind="training", cases=results, skipped=skipped)


def _listed_skips(data: Mapping[str, Any]) -> list[dict[str, str]]:
    """The runs a reference file itself lists under ``skipped:`` (entries that are not mappings ignored)."""
    listed = data.get("skipped")
    return [{"id": str(s.get("id", "?")), "reason": f"skipped by the reference file: {s.get('reason', '')}"}
            for s in (listed if isinstance(listed, list) else []) if isinstance(s, Mapping)]


# ------------------------------------------------------------------ collectives
# Ops of twin-reference-collectives/v1 (CASES.md): the twin's collectives plus DeepEP-style
# expert dispatch/combine; files spell some the nccl-tests way (alltoall, sendrecv).
COLLECTIVE_OPS = (*OPS, "ep_dispatch", "ep_combine")
_OP_SPELLINGS = {"alltoall": "all_to_all", "sendrecv": "send_recv", "allreduce": "all_reduce",
                 "allgather": "all_gather", "reducescatter": "reduce_scatter"}
# NCCL algorithm names (NCCL_ALGO) -> the twin's: NVLSTree is NVLS inside the domain and a
# tree across (the twin's "nvls" on a multi-domain group); CollNet Direct/Chain are SHARP.
_ALGORITHM_SPELLINGS = {"ring": "ring", "tree": "tree", "nvls": "nvls", "nvlstree": "nvls", "collnet": "sharp",
                        "collnetdirect": "sharp", "collnetchain": "sharp", "sharp": "sharp"}
_POINT_NUMBERS = ("bytes", "busbw_GBps", "algbw_GBps", "time_us")
_PER = (None, "gpu", "rank", "nic")


def collective_op(value: Any) -> str:
    """The twin's name of a reference file's op (``alltoall`` -> ``all_to_all``); SpecError if unknown."""
    v = str(value or "").strip().lower().replace("-", "_")
    if v in COLLECTIVE_OPS:
        return v
    op = _OP_SPELLINGS.get(v.replace("_", ""))
    if op is None:
        raise SpecError("op", f"must be one of {', '.join(COLLECTIVE_OPS)}, alltoall, sendrecv (got {value!r})")
    return op


def _collective_algorithm(value: Any) -> str | None:
    if value is None:
        return None
    algo = _ALGORITHM_SPELLINGS.get(str(value).strip().lower().replace("-", "").replace("_", ""))
    if algo is None:
        raise SpecError("algorithm", f"must be one of ring, tree, nvls, nvlstree, collnet or null (got {value!r})")
    return algo


@dataclass(frozen=True)
class _Layout:
    """How a measured group sits: ``n`` ranks, ``ranks_per_node`` of them on each of ``nodes``
    nodes, placed ``stride`` GPUs apart on a cluster of ``cluster_gpus`` GPUs.
    """

    n: int
    nodes: int
    ranks_per_node: int
    stride: int
    cluster_gpus: int


def _collective_layout(c: Mapping[str, Any], notes: list[str]) -> _Layout:
    """Ranks and their placement (CASES.md, "Which GPUs took part").

    ``num_gpus`` counts the ranks of the test; ``ranks_per_node`` (or ``num_gpus``/``nodes``)
    how many of each node's ``gpus_per_node`` GPUs took part. A run with fewer ranks than GPUs
    on each of several nodes (e.g. ``-N 1``: one GPU and its NIC per node) is placed one rank
    every ``gpus_per_node // ranks_per_node`` GPUs, so each rank keeps its own NICs.
    """
    per_node = _number(c.get("gpus_per_node"), "cluster.gpus_per_node", integer=True) or 8
    n = _number(c.get("num_gpus"), "cluster.num_gpus", integer=True)
    nodes = _number(c.get("nodes"), "cluster.nodes", integer=True)
    rpn = _number(c.get("ranks_per_node"), "cluster.ranks_per_node", integer=True)
    if n is None:
        nodes = nodes or ASSUMED_NODES
        n = nodes * (rpn or per_node)
        notes.append(f"rank count not published: {nodes} nodes ({n} GPUs) assumed")
    if rpn is None and nodes is not None:
        if n % nodes:
            raise SpecError("cluster.nodes", f"{n} ranks do not split evenly over {nodes} nodes")
        rpn = n // nodes
    if rpn is None:
        rpn = min(n, per_node)
    if rpn > per_node:
        raise SpecError("cluster.ranks_per_node", f"must be <= gpus_per_node ({per_node}) (got {rpn})")
    nodes_used = -(-n // rpn)
    if nodes is not None and nodes != nodes_used:
        raise SpecError("cluster.nodes", f"{nodes} nodes do not hold {n} ranks at {rpn} per node")
    if nodes_used > 1 and rpn < per_node:
        if per_node % rpn:
            raise SpecError("cluster.ranks_per_node", f"must divide gpus_per_node ({per_node}) (got {rpn})")
        return _Layout(n, nodes_used, rpn, per_node // rpn, nodes_used * per_node)
    return _Layout(n, nodes_used, rpn, 1, n)


@dataclass(frozen=True)
class _Point:
    size: float | None
    busbw: float            # GB/s, as published or derived from algbw or time
    published_busbw: bool   # False: derived from time (no rounding to 0.01 GB/s)
    per_nic: bool


def _collective_point(point: Any, i: int, op: str, n: int) -> _Point | None:
    """One measured point, its numbers checked (SpecError names the bad field); None if it
    carries no bandwidth (or only nccl-tests' rounding noise below 1 GB/s).
    """
    where = f"points[{i}]"
    point = _mapping(point, where)
    vals = {k: _number(point.get(k), f"{where}.{k}", minimum=-1.0) for k in _POINT_NUMBERS}
    rng = point.get("busbw_GBps_range")
    if rng is not None:
        if not isinstance(rng, list) or len(rng) != 2:
            raise SpecError(f"{where}.busbw_GBps_range", f"must be a [low, high] pair (got {rng!r})")
        rng = [_number(v, f"{where}.busbw_GBps_range[{j}]") for j, v in enumerate(rng)]
    per = point.get("per")
    if per not in _PER:
        raise SpecError(f"{where}.per", f"must be gpu, rank, nic or null (got {per!r})")
    if per == "nic" and op.startswith("ep_"):
        raise SpecError(f"{where}.per", "per: nic is defined for nccl-tests collectives, not expert dispatch/combine")
    size = vals["bytes"] or None
    factor = bus_factor("all_to_all" if op.startswith("ep_") else op, n)
    bw, published = vals["busbw_GBps"], True
    if not (bw and bw >= 1.0):
        if rng:
            bw = (rng[0] + rng[1]) / 2.0
        elif vals["algbw_GBps"] and vals["algbw_GBps"] * factor >= 1.0:
            bw = vals["algbw_GBps"] * factor
        elif size and vals["time_us"] and vals["time_us"] > 0:
            # nccl-tests: algbw = size / time; busbw = algbw * factor (PERFORMANCE.md)
            bw, published = size / (vals["time_us"] * 1e-6) / 1e9 * factor, False
        else:
            return None  # no figure, or only sub-GB/s rounding noise
    return _Point(size=size, busbw=float(bw), published_busbw=published, per_nic=per == "nic")


def _node_egress(op: str, algorithm: str, size: float, n: int, nodes: int, k_node: int) -> float:
    """Bytes one node of the group sends to other nodes in one collective of ``size`` bytes
    (nccl-tests sizes), by op and the algorithm the twin chose (CASES.md, "Per-NIC points").
    """
    if op == "all_reduce":
        if algorithm == "ring":
            return 2.0 * (n - 1) / n * size         # every ring leaves the node once
        if algorithm == "sharp":
            return size                              # each node sends its reduced share up once
        return 2.0 * (nodes - 1) / nodes * size      # tree / NVLS-tree: a reduction tree over nodes
    if op in ("all_gather", "reduce_scatter"):
        return (n - 1) / n * size
    if op == "all_to_all":
        return k_node * (n - k_node) / n * size      # every rank's share for the off-node ranks
    return size                                      # broadcast ring, send_recv (one pair crosses)


@dataclass(frozen=True)
class CollectiveSetup:
    """One collectives case as the twin sees it: the op (and forced algorithm), where the
    measured group sits in the cluster's hierarchy, and its measured points.
    """

    id: str
    op: str
    algorithm: str | None
    cluster: Cluster
    hierarchy: Any
    span: Any
    n: int
    points: tuple[_Point, ...]
    notes: tuple[str, ...]


def collective_setup(engine: Engine, case: Any) -> CollectiveSetup:
    """Read one collectives case (SpecError names a malformed field)."""
    case = _mapping(case, "case")
    cid = _case_id(case, "?")
    op = collective_op(case.get("op"))
    algorithm = _collective_algorithm(case.get("algorithm"))
    notes: list[str] = []
    c = _mapping(case.get("cluster"), "cluster")
    layout = _collective_layout(c, notes)
    cluster = _cluster(engine, c, notes, "cluster", num_gpus=layout.cluster_gpus)
    scn = Scenario(cluster=cluster, model=_dummy_model(), plan=Plan(gbs=cluster.num_gpus, dp=None, tp=1))
    engine.model.validate(scn)  # the fabric's own rules (e.g. rails per node)
    hierarchy = engine.model.hierarchy(scn)
    n = layout.n
    span = place_group(n, layout.stride, hierarchy)
    if algorithm == "sharp" and not any(t.reduction == "sharp" for t in hierarchy.tiers[1:]):
        sharp_tiers = tuple(dataclasses.replace(t, reduction="sharp") for t in hierarchy.tiers[1:])
        hierarchy = dataclasses.replace(hierarchy, tiers=(hierarchy.tiers[0], *sharp_tiers))
    parsed = tuple(p for p in (_collective_point(p, i, op, n) for i, p in enumerate(_points(case))) if p is not None)
    return CollectiveSetup(cid, op, algorithm, cluster, hierarchy, span, n, parsed, tuple(notes))


# DeepEP's benchmark (deepseek-ai/DeepEP tests/test_internode.py), which UCCL-EP reuses:
# 4096 tokens, hidden 7168, top-8 where a case is silent; a token's bytes are hidden x 2 for
# BF16 and hidden x 2 x (1 + 4/128) / 2 for FP8 (one FP32 scale per 128 channels).
_EP_DEFAULTS = {"tokens_per_rank": 4096, "hidden": 7168, "top_k": 8}
_FP8_SCALE_OVERHEAD = 1.0 + 4.0 / 128.0
# What an ``ep_dispatch``/``ep_combine`` workload may say (CASES.md). ``library`` names the
# implementation measured (DeepEP, UCCL-EP: text for the reader, like ``source``); every other
# key changes the prediction or is refused, so a misspelt or unmodelled one is that case's error.
_EP_WORKLOAD_KEYS = ("tokens_per_rank", "hidden", "top_k", "top_k_groups", "num_experts", "dispatch_dtype",
                     "combine_dtype", "kernel", "library")
# DeepEP's kernels the twin models: the normal (high-throughput) ones, NVLink-forwarded and
# deduplicated per node (``dedup_dispatch_cost``). Its low-latency kernels send one RDMA message per
# (token, expert) with no forwarding (deepseek-ai/DeepEP README, "Low-latency kernels"): another
# model, not built, so such a case is skipped with that reason rather than scored as a normal one.
_EP_KERNELS = ("normal",)


@dataclass(frozen=True)
class EPWorkload:
    """An expert-parallel case's workload: tokens per rank, bytes per token, experts per token
    and the node-limited routing's group count (None: unlimited).
    """

    tokens: float
    token_bytes: float
    top_k: int
    groups: int | None
    # Routed experts over the group (``dedup_dispatch_cost``'s ``experts``); 0: not stated.
    experts: int = 0

    @property
    def dispatched_bytes(self) -> float:
        """Bytes one rank sends as one all-to-all copy per expert (tokens x top_k x token bytes)."""
        return self.tokens * self.top_k * self.token_bytes


def ep_workload(case: Mapping[str, Any], op: str) -> EPWorkload:
    """The workload of an ``ep_dispatch``/``ep_combine`` case (DeepEP's defaults where silent)."""
    wl = _mapping(case.get("workload"), "workload")
    for key in wl:
        if key not in _EP_WORKLOAD_KEYS:
            raise SpecError(f"workload.{key}", f"unknown field; expected one of: {', '.join(_EP_WORKLOAD_KEYS)}")
    kernel = str(wl.get("kernel", "normal")).lower()
    if kernel not in _EP_KERNELS:
        raise SpecError("workload.kernel", f"must be normal: only DeepEP's normal kernels are modelled, not its "
                                           f"low-latency ones (got {kernel!r})")
    dtype = str(wl.get("dispatch_dtype" if op == "ep_dispatch" else "combine_dtype", "bf16")).lower()
    if dtype not in ("fp8", "bf16"):
        raise SpecError(f"workload.{'dispatch' if op == 'ep_dispatch' else 'combine'}_dtype",
                        f"must be fp8 or bf16 (got {dtype!r})")
    vals = {k: float(_number(wl.get(k), f"workload.{k}") or d) for k, d in _EP_DEFAULTS.items()}
    groups = _number(wl.get("top_k_groups"), "workload.top_k_groups", integer=True)
    experts = _number(wl.get("num_experts"), "workload.num_experts", integer=True) or 0
    if experts and experts < vals["top_k"]:
        raise SpecError("workload.num_experts", f"must be at least top_k ({vals['top_k']:.0f}) (got {experts})")
    size = _FP8_SCALE_OVERHEAD if dtype == "fp8" else 2.0
    return EPWorkload(vals["tokens_per_rank"], vals["hidden"] * size, int(vals["top_k"]), groups, int(experts))


def ep_bytes(case: Mapping[str, Any], op: str) -> float:
    """Bytes one rank dispatches (or combines) as a plain all-to-all: tokens x top_k x token bytes."""
    return ep_workload(case, op).dispatched_bytes


def ep_predicted_GBps(wl: EPWorkload, span: Any, hierarchy: Any) -> tuple[float, Any]:
    """DeepEP's reported bandwidth as the twin predicts it, and the cost behind it.

    Inside one NVLink domain DeepEP reports the NVLink bandwidth (test_intranode.py), the
    bottleneck link's, at which its own kernels (not NCCL's p2p schedule) run the all-to-all
    (``dedup_dispatch_cost`` inside one domain). Across domains it reports RDMA bytes / kernel
    time with RDMA bytes =
    ``num_rdma_token_sent`` x token bytes, the (token, node) pairs deduplicated by node *with
    the token's own node counted* (tests/test_internode.py: ``rdma_idx.ne(-1).sum()``; DeepEP's
    V2 README calls it a logical bandwidth that includes local traffic); the test routes over
    ``num_topk_groups = min(num_nodes, 4)`` groups. The twin's time is its DeepEP dispatch
    model (``dedup_dispatch_cost``).
    """
    cost = dedup_dispatch_cost(wl.token_bytes, wl.tokens, wl.top_k, span, hierarchy, wl.groups, wl.experts)
    if span.m <= 1:
        return float(cost.bottleneck_bw_Bps) / 1e9, cost
    pairs = wl.tokens * float(domains_per_token(span.m, wl.top_k, wl.groups, wl.experts))
    return pairs * wl.token_bytes / float(cost.time_s) / 1e9, cost


def _score_collective(engine: Engine, case: Any) -> CaseResult | str:
    """One case scored, or the reason it is skipped; SpecError for a malformed case."""
    setup = collective_setup(engine, case)
    cid, op, algorithm, cluster = setup.id, setup.op, setup.algorithm, setup.cluster
    hierarchy, span, n, parsed = setup.hierarchy, setup.span, setup.n, setup.points
    notes = list(setup.notes)
    so = cluster.scale_out
    nics_node = (so.nics_per_node if so is not None and so.nics_per_node else cluster.gpus_per_node)
    points: list[dict[str, Any]] = []
    for pt in parsed:
        if op in ("ep_dispatch", "ep_combine"):
            wl = ep_workload(case, op)
            size = wl.dispatched_bytes
            predicted, cost = ep_predicted_GBps(wl, span, hierarchy)
        else:
            size = pt.size or PEAK_MESSAGE_BYTES
            cost = collective_cost(op, size, span, hierarchy, algorithm)
            t = float(cost.time_s)
            if pt.per_nic:
                if span.nodes <= 1:
                    raise SpecError("points.per", "per: nic needs a group that spans nodes")
                k_node = -(-n // span.nodes)
                nics = 1 if op == "send_recv" else max(1, round(k_node * nics_node / cluster.gpus_per_node))
                egress = _node_egress(op, str(cost.algorithm), size, n, int(span.nodes), k_node)
                predicted = egress / nics / t / 1e9
            else:
                predicted = size * bus_factor(op, n) / t / 1e9  # achieved busbw, latency included
        points.append({"bytes": size, "predicted_busbw_GBps": predicted, "measured_busbw_GBps": pt.busbw,
                       "algorithm": str(cost.algorithm)})
    if not points:
        return "no bus bandwidth published (only algbw with unknown rank count, or no figure)"
    errs = sorted(abs(p["predicted_busbw_GBps"] - p["measured_busbw_GBps"]) / p["measured_busbw_GBps"]
                  for p in points)
    mid = _quantile(errs, 0.5)
    # The case's headline figure: the point whose error is the median one.
    rep = min(points, key=lambda p: abs(abs(p["predicted_busbw_GBps"] - p["measured_busbw_GBps"])
                                        / p["measured_busbw_GBps"] - mid))
    if len(points) > 1:
        notes.append(f"{len(points)} message sizes; the point with the median error is shown")
    return CaseResult(id=cid, family=str(case.get("family") or op), predicted=rep["predicted_busbw_GBps"],
                      measured=rep["measured_busbw_GBps"], metric="busbw_GBps", notes=notes,
                      points=points if len(points) > 1 else [], nodes=int(span.nodes))


def _points(case: Mapping[str, Any]) -> list[Any]:
    pts = case.get("points")
    if pts is None:
        return []
    if not isinstance(pts, list):
        raise SpecError("points", f"must be a list (got {type(pts).__name__})")
    return pts


def validate_collectives(engine: Engine, data: Mapping[str, Any]) -> Report:
    """Score every case of a ``twin-reference-collectives/v1`` document.

    A case that cannot be read (unknown op, malformed cluster, a non-numeric point) or
    modelled is listed as skipped with the reason; the other cases are still scored.
    """
    results: list[CaseResult] = []
    skipped: list[dict[str, str]] = []
    for i, case in enumerate(data.get("cases") or []):
        cid = _case_id(case, f"cases[{i}]") if isinstance(case, Mapping) else f"cases[{i}]"
        try:
            result = _score_collective(engine, case)
        except TwinError as err:
            skipped.append({"id": cid, "reason": f"cannot model: {err}"})
            continue
        except _MALFORMED as err:
            skipped.append({"id": cid, "reason": f"malformed case: {type(err).__name__}: {err}"})
            continue
        if isinstance(result, str):
            skipped.append({"id": cid, "reason": result})
        else:
            results.append(result)
    skipped += _listed_skips(data)
    return Report(kind="collectives", cases=results, skipped=skipped)


def _dummy_model() -> Model:
    """A placeholder model for scenarios used only to build a hierarchy."""
    return Model(layers=1, hidden=64, heads=1, vocab=64, seq_len=64)


def validate_file(engine: Engine, path: str | Path) -> Report:
    """Score a reference file of either schema; SpecError if it is malformed."""
    data = read_mapping(path)
    if not isinstance(data, Mapping) or not isinstance(data.get("cases"), list):
        raise SpecError(str(path), "must be a mapping with a 'cases' list")
    kind = data.get("schema")
    if kind == TRAINING_SCHEMA:
        return validate_training(engine, data)
    if kind == COLLECTIVES_SCHEMA:
        return validate_collectives(engine, data)
    raise SpecError(f"{path}: schema", f"must be {TRAINING_SCHEMA!r} or {COLLECTIVES_SCHEMA!r} (got {kind!r})")
