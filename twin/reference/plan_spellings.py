"""Published spellings of a training case's plan fields (precision, recomputation,
optimizer sharding, rank order, pipeline schedule) in the twin's own.
"""

from __future__ import annotations

import re
from typing import Any

from twin.core.errors import SpecError


def _norm_precision(value: Any) -> str | None:
    if value is None:
        return None
    v = str(value).lower()
    for key in ("fp4", "fp8", "bf16", "fp16", "tf32", "fp32"):
        if key in v:
            return key
    return v


# Low-precision recipes as tables spell them after the precision (Megatron-Bridge and NeMo
# performance tables: "FP8-CS" current scaling, "FP8-MX" MXFP8, "FP8-DS" delayed scaling,
# "FP8-SB"/"blockwise" DeepSeek-style 128x128 blocks; "NVFP4"; Transformer Engine's recipe
# names: DelayedScaling, Float8CurrentScaling, Float8BlockScaling, MXFP8BlockScaling, NVFP4BlockScaling).
_RECIPE_SPELLINGS = (
    (re.compile(r"nvfp4"), "nvfp4"),
    (re.compile(r"mxfp8|fp8[-_ ]?mx\b|mx[-_ ]?fp8"), "mxfp8"),
    (re.compile(r"fp8[-_ ]?(cs|current)\b|current[-_ ]?scaling|float8currentscaling"), "current"),
    (re.compile(r"fp8[-_ ]?(ds|delayed)\b|delayed[-_ ]?scaling|tensorwise"), "delayed"),
    (re.compile(r"fp8[-_ ]?(sb|bs|block(wise)?)\b|blockwise|float8blockscaling|deepseek[-_ ]style"), "blockwise"),
)


def _norm_recipe(value: Any) -> str | None:
    """The low-precision recipe a published precision spelling names (``FP8-CS`` -> current,
    ``MXFP8`` -> mxfp8, ``NVFP4`` -> nvfp4), None where it names none.
    """
    if value is None:
        return None
    v = str(value).lower()
    for pattern, recipe in _RECIPE_SPELLINGS:
        if pattern.search(v):
            return recipe
    return None


# A precision a case's text names (its id, family, source or notes) where its plan does not:
# FP8 named for the token exchange or the optimizer state only is not the GEMMs' precision.
_NOT_GEMM = r"(?![-_ ]?(dispatch|combine|a2a|all-to-all|alltoall|communication|comm|gradients?|optimizer|states?|"\
            r"cache|kv|weights? only|inference))"
_TEXT_PRECISIONS = (
    (re.compile(r"(?<![a-z0-9])(nv)?fp4" + _NOT_GEMM), "fp4"),
    (re.compile(r"(?<![a-z0-9])(mx)?fp8" + _NOT_GEMM), "fp8"),
    (re.compile(r"(?<![a-z0-9])bf16" + _NOT_GEMM), "bf16"),
    (re.compile(r"(?<![a-z0-9])fp16" + _NOT_GEMM), "fp16"),
)


def precision_in_text(texts: Any) -> tuple[str, str | None, str] | None:
    """(precision, recipe, the text's name) from the first of ``texts`` ((name, text) pairs, most
    specific first) that names exactly one training precision; texts naming several (a table's
    header, "BF16 and FP8 rows") are passed over. None where none names one.
    """
    for name, text in texts:
        low = str(text or "").lower()
        found = {prec for pattern, prec in _TEXT_PRECISIONS if pattern.search(low)}
        if len(found) == 1:
            prec = found.pop()
            return prec, _norm_recipe(low) if prec in ("fp8", "fp4") else None, name
    return None


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


def _norm_schedule(value: Any) -> str:
    """A published pipeline schedule (``ZB-H1``, ``DualPipe``, ``interleaved 1F1B``) in the twin's spelling."""
    key = re.sub(r"[^a-z0-9]", "", str(value).lower())
    got = _SCHEDULE_SPELLINGS.get(key)
    if got is None:
        raise SpecError("plan.schedule", f"unknown pipeline schedule {value!r}; expected one of "
                                         + ", ".join(sorted(set(_SCHEDULE_SPELLINGS.values()))))
    return got
