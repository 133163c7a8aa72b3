"""The software stack of a training case (one rule for every case) and what that stack
does with a knob the case leaves unstated (``STACK_DEFAULTS``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from twin.core.errors import SpecError
from twin.engine import Engine

# The software stack of a case (one rule for every case), read from what the case states of
# its software, release and date:
# 1. its own ``software`` field;
# 2. a stack its text names (family, source or notes, case-insensitive; the first of
#    ``_SOFTWARE_IN_TEXT``): NeMo AutoModel, torchtitan, Megatron-DeepSpeed / DeepSpeed (an eager
#    fp16 Megatron-DeepSpeed run says so in its notes), NeMo Megatron; "FSDP2" only in the family
#    (Megatron-LM also runs torch FSDP2 under its own kernels);
# 3. the run's date, the latest year its family or source states (a year, or a release tag such
#    as "NeMo 24.07", "v25.05", "pytorch:25.09", read as 20YY): up to 2022, the Megatron-LM code
#    base before Megatron-Core and Transformer Engine (Shoeybi et al. 2019, Narayanan et al. 2021,
#    Korthikanti et al. 2022, the README tables of 2020-2021) ran its eager Apex kernels:
#    megatron-deepspeed; from 2025, or where the text names Transformer Engine 2.x or cuDNN 9, the
#    Megatron-Core stack is Transformer Engine 2.x with cuDNN 9 (megatron-core-te2: TE 2.0 was
#    released in 2025, and every NGC PyTorch/NeMo container of 2025 ships cuDNN 9; its fused
#    attention at the measured cuDNN figures, "The attention kernel of a stack" in
#    docs/fidelity.md). The 2023-2024 runs keep the fitted attention of megatron-core-te, which
#    they reached (the same section: the cuDNN figures would put them 7-34% fast);
# 4. else megatron-core-te (NeMo, Megatron-Core and NVIDIA's performance recipes; Meta's Llama 3
#    stack is not public and is taken as that default too).
_SOFTWARE_IN_TEXT = ((re.compile(r"\bauto-?model\b", re.IGNORECASE), "nemo-automodel"),
                     (re.compile(r"\btorchtitan\b", re.IGNORECASE), "pytorch-fsdp2"),
                     (re.compile(r"\bdeep-?speed\b", re.IGNORECASE), "megatron-deepspeed"),
                     (re.compile(r"\bnemo[- ]megatron\b|\bbignlp\b", re.IGNORECASE), "nemo-megatron"))
_FSDP2_FAMILY = re.compile(r"\bfsdp2\b", re.IGNORECASE)
# A year (2019-2029) or a container/framework release tag YY.MM after NeMo / v / pytorch: / release.
_YEAR = re.compile(r"(?<![\d.])(20[12]\d)(?!\d)")
_RELEASE = re.compile(r"(?:\bnemo|\bv|pytorch:|\brelease|\bcontainer)[ _-]?([12]\d)\.(0[1-9]|1[0-2])\b",
                      re.IGNORECASE)
_TE2 = re.compile(r"transformer[ _-]?engine[ _-]?v?2\.|\bTE[ _-]?v?2\.\d|\bcudnn[ _-]?v?9\b", re.IGNORECASE)
_PRE_TE_LAST_YEAR = 2022
_TE2_FIRST_YEAR = 2025
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


def run_year(case: Mapping[str, Any]) -> int | None:
    """The latest year a case's family or source states (a year, or a release tag YY.MM as 20YY);
    None where they state none.
    """
    text = f"{case.get('family') or ''} | {case.get('source') or ''}"
    years = [int(y) for y in _YEAR.findall(text)] + [2000 + int(yy) for yy, _ in _RELEASE.findall(text)]
    return max(years) if years else None


def case_software(case: Mapping[str, Any]) -> str | Mapping[str, Any]:
    """The software stack of a case, by the one rule above (a preset name or a mapping)."""
    stated = case.get("software")
    if stated:
        if not isinstance(stated, str | Mapping):
            raise SpecError("software", f"must be a software preset name or a mapping (got {type(stated).__name__})")
        return stated
    family = str(case.get("family") or "")
    text = " | ".join(str(case.get(k) or "") for k in ("family", "source", "notes"))
    for pattern, preset in _SOFTWARE_IN_TEXT:
        if pattern.search(text):
            return preset
    if _FSDP2_FAMILY.search(family):
        return "pytorch-fsdp2"
    year = run_year(case)
    if year is not None and year <= _PRE_TE_LAST_YEAR:
        return "megatron-deepspeed"
    if _TE2.search(text) or (year is not None and year >= _TE2_FIRST_YEAR):
        return "megatron-core-te2"
    return "megatron-core-te"


def _stack(engine: Engine, case: Mapping[str, Any]) -> tuple[str | Mapping[str, Any], str, Mapping[str, Any]]:
    """The case's software stack, its preset name, and its ``STACK_DEFAULTS`` (Megatron-Core's
    for a stack that has none).
    """
    stack = case_software(case)
    name = stack if isinstance(stack, str) else str(stack.get("preset", "megatron-core-te"))
    return stack, name, STACK_DEFAULTS.get(engine.catalog.canonical("software", name),
                                           STACK_DEFAULTS["megatron-core-te"])
