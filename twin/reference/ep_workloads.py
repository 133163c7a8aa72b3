"""The workload of an expert-parallel case (``ep_dispatch``/``ep_combine``: DeepEP-style
dispatch and combine) and the bandwidth DeepEP reports for it as the twin predicts it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from twin.core.collectives import dedup_dispatch_cost, direct_dispatch_cost
from twin.core.errors import SpecError
from twin.core.moe_routing import domains_per_token
from twin.reference.case_fields import _mapping, _number

# DeepEP's benchmark (deepseek-ai/DeepEP tests/test_internode.py), which UCCL-EP reuses:
# 4096 tokens, hidden 7168, top-8 where a case is silent; a token's bytes are hidden x 2 for
# BF16 and hidden x 2 x (1 + 4/128) / 2 for FP8 (one FP32 scale per 128 channels).
_EP_DEFAULTS = {"tokens_per_rank": 4096, "hidden": 7168, "top_k": 8}
# Its low-latency benchmark (tests/test_low_latency.py): 128 tokens a rank, 288 experts.
_LL_DEFAULTS = {"tokens_per_rank": 128, "hidden": 7168, "top_k": 8}
_LL_EXPERTS = 288
_FP8_SCALE_OVERHEAD = 1.0 + 4.0 / 128.0
# What an ``ep_dispatch``/``ep_combine`` workload may say (CASES.md). ``library`` names the
# implementation measured (DeepEP, UCCL-EP: text for the reader, like ``source``); every other
# key changes the prediction or is refused, so a misspelt or unmodelled one is that case's error.
_EP_WORKLOAD_KEYS = ("tokens_per_rank", "hidden", "top_k", "top_k_groups", "num_experts", "dispatch_dtype",
                     "combine_dtype", "kernel", "library")
# DeepEP's kernels, each priced as it moves its bytes:
# - normal (V1's high-throughput kernels) and hybrid (V2's ElasticBuffer in its hybrid mode,
#   which keeps V1's scheme: deepseek-ai/DeepEP README, "Both hybrid & direct modes remain
#   supported"; "v2" names it too): a token once per destination node over RDMA, forwarded over
#   NVLink to its ranks (``dedup_dispatch_cost``);
# - low_latency (V1's low-latency kernels, docs/legacy.md): one message per (token, selected
#   expert) straight to the expert's rank (``direct_dispatch_cost``).
# V2's direct mode is not priced (its traffic pattern is not documented beyond its name): refused.
_EP_KERNELS = {"normal": "normal", "hybrid": "normal", "v2": "normal", "low_latency": "low_latency",
               "low-latency": "low_latency"}


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
    # "normal" (forwarded and deduplicated per node) or "low_latency" (one message per expert).
    kernel: str = "normal"

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
        raise SpecError("workload.kernel", f"must be one of {', '.join(_EP_KERNELS)} (V2's direct mode is not "
                                           f"modelled: its traffic pattern is not published) (got {kernel!r})")
    dtype = str(wl.get("dispatch_dtype" if op == "ep_dispatch" else "combine_dtype", "bf16")).lower()
    if dtype not in ("fp8", "bf16"):
        raise SpecError(f"workload.{'dispatch' if op == 'ep_dispatch' else 'combine'}_dtype",
                        f"must be fp8 or bf16 (got {dtype!r})")
    low_latency = _EP_KERNELS[kernel] == "low_latency"
    defaults = _LL_DEFAULTS if low_latency else _EP_DEFAULTS
    vals = {k: float(_number(wl.get(k), f"workload.{k}") or d) for k, d in defaults.items()}
    groups = _number(wl.get("top_k_groups"), "workload.top_k_groups", integer=True)
    experts = _number(wl.get("num_experts"), "workload.num_experts", integer=True) or (_LL_EXPERTS if low_latency
                                                                                      else 0)
    if experts and experts < vals["top_k"]:
        raise SpecError("workload.num_experts", f"must be at least top_k ({vals['top_k']:.0f}) (got {experts})")
    size = _FP8_SCALE_OVERHEAD if dtype == "fp8" else 2.0
    return EPWorkload(vals["tokens_per_rank"], vals["hidden"] * size, int(vals["top_k"]), groups, int(experts),
                      _EP_KERNELS[kernel])


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
    if wl.kernel == "low_latency":
        # DeepEP's low-latency test reports every (token, selected expert) message's bytes over
        # the kernel's time (tests/test_low_latency.py: num_dispatch_comm_bytes).
        cost = direct_dispatch_cost(wl.token_bytes, wl.tokens, wl.top_k, span, hierarchy)
        return wl.dispatched_bytes / float(cost.time_s) / 1e9, cost
    cost = dedup_dispatch_cost(wl.token_bytes, wl.tokens, wl.top_k, span, hierarchy, wl.groups, wl.experts)
    if span.m <= 1:
        return float(cost.bottleneck_bw_Bps) / 1e9, cost
    pairs = wl.tokens * float(domains_per_token(span.m, wl.top_k, wl.groups, wl.experts))
    return pairs * wl.token_bytes / float(cost.time_s) / 1e9, cost
