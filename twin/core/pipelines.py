"""Pipeline schedules: each one's bubble, activations in flight and parameter copies.

``plan.schedule`` names the schedule; "auto" (the default) is the choice by ``vp`` the
twin always made: interleaved when vp > 1, else 1F1B (the same numbers, bit for bit).

Notation, per micro-batch on the mean pipeline stage (one GPU): T_F the forward, T_B the
input-gradient ("dgrad") part of the backward, recomputation included, T_W its
weight-gradient ("wgrad") part; the communication a micro-batch exposes is split between
forward and backward in proportion to their compute. The DeepSeek-V3 report (arXiv
2412.19437, §3.2.1, Table 2) and the deepseek-ai/DualPipe README write B for the whole
backward (T_B + T_W), W for T_W and F&B for a forward and a backward chunk overlapped
(here their sum with the communication the plan exposes: ``plan.overlap.ep_comm`` is
DualPipe's all-to-all overlap). p pipeline ranks, v chunks per rank, m micro-batches.

=============== ======================================= ================ ========== =====
schedule        bubble                                  in flight        parameters source
=============== ======================================= ================ ========== =====
1f1b            (p-1)(T_F+T_B+T_W)                      min(p, m)        1x         [1]
interleaved     (p-1)(T_F+T_B+T_W) / v                  min(p, m)(1+e)   1x         [2]
zero_bubble_h1  (p-1) max(T_F+T_B-T_W, T_B)             min(p, m)        1x         [3]
zero_bubble_h2  (p-1) max(T_F+T_B-2T_W, 0)              min(2p-1, m)     1x         [3]
zero_bubble_v   (p-1) max(T_F+T_B-2T_W, 0)              min(p, m)        1x         [4]
dualpipe        (p/2-1) max(F&B+B-3W, 0)                p+1              2x         [5]
dualpipev       (p-1) max(F&B+B-3W, 0) / 2              p+1/2            1x         [6]
=============== ======================================= ================ ========== =====

[1] Narayanan et al. 2019 (PipeDream-Flush); the DualPipe README's table: (PP-1)(F+B), PP.
[2] Narayanan et al. 2021 (SC'21) §2.2: the bubble shrinks by v; e = (p-1)/(p v) of a
    micro-batch more in flight (§2.2.2).
[3] Qi et al. 2024, "Zero Bubble Pipeline Parallelism" (ICLR 2024, arXiv 2401.10241): ZB-H1
    (§2.1) keeps 1F1B's p micro-batches and leaves (p-1)(T_F+T_B-T_W), one third of 1F1B's
    when T_F = T_B = T_W (the DualPipe README's ZB1P, (PP-1)(F+B-2W)); the paper takes
    T_W <= T_F, past which the input-gradient chain (p-1)T_B remains. ZB-H2 (§2.2) holds
    up to 2p-1 micro-batches and leaves (p-1)(T_F+T_B-2T_W), zero when T_F = T_B = T_W.
    Both are measured as the paper does, each rank's time from its first F to its last W
    (the zero-bubble repository's "longest stage time", zerobubble/scheduler/zb.py):
    ZB-H2's zero needs the paper's optimizer post-validation (§4), which lets the ranks
    start the next step staggered. tests/core/test_schedules.py list-schedules both and
    checks these forms, the floor included.
[4] ZB-V (arXiv 2401.10241 v2 §6; Qi et al. 2024, "Pipeline Parallelism with Controllable
    Memory", arXiv 2405.15362, V-ZB): two chunks per rank in a V, 1F1B's p micro-batches,
    zero bubble when T_F = T_B = T_W. Neither paper gives a closed form for other pass
    times; the twin takes ZB-H2's, which ZB-V matches at equal passes (an assumption,
    docs/fidelity.md).
[5] DeepSeek-V3 report Table 2: DualPipe feeds micro-batches from both ends, each rank
    holding stages i and p-1-i: 2x the parameters and PP+1 micro-batches of activations.
[6] deepseek-ai/DualPipe README (DualPipeV, the "cut-in-half" DualPipe): its table counts PP
    stages on PP/2 devices, i.e. 2p stages of half a rank's layers on our p ranks: the
    same bubble over chunks of half the time, PP+1 = 2p+1 half-rank micro-batches, and the
    parameters of p ranks (2x a half-rank stage).

Rank 0 of ZB-V, DualPipe and DualPipeV holds both ends of the model, the embedding and
the LM head (DeepSeek-V3 report §2.2: "the shallowest layers (including the embedding
layer) and deepest layers (including the output head) of the model on the same PP
rank"): its parameters and its logits count there. DualPipe's rank 0 runs the first and the
last stage, half of the micro-batches through each, so its work per micro-batch is their
mean (``schedule.stage_times``); ZB-V's and DualPipeV's compute is placed as under 1F1B
(first and last rank). DualPipe's second parameter copy adds no communication of its own
beyond the data-parallel gradient traffic of twice the parameters.

Written once for one scenario and for a batch (``twin.core.ops``).
"""

from __future__ import annotations

from typing import Any

from twin.core import ops

# The schedules whose step the twin computed before ``plan.schedule`` existed (chosen by vp).
LEGACY = ("auto", "1f1b", "interleaved")
# Rank 0 holds the embedding and the LM head (module docstring).
BOTH_ENDS_ON_FIRST = ("zero_bubble_v", "dualpipe", "dualpipev")


def resolved(schedule: str, vp: int) -> str:
    """The schedule one plan runs ("auto": interleaved when vp > 1, else 1f1b)."""
    if schedule != "auto":
        return schedule
    return "interleaved" if vp > 1 else "1f1b"


def _split(t_avg: Any, fwd: Any, bwd: Any, wgrad: Any) -> tuple[Any, Any, Any]:
    """(T_F, T_B, T_W): the mean stage's passes with the exposed communication shared out.

    ``fwd`` and ``bwd`` are the mean stage's forward and backward (recompute and wgrad
    included) compute per micro-batch, ``t_avg`` both with the exposed communication.
    """
    compute = fwd + bwd
    comm = t_avg - compute
    share = ops.where(compute > 0, fwd / ops.maximum(compute, 1e-300), 0.5)
    return fwd + comm * share, bwd - wgrad + comm * (1.0 - share), wgrad


def bubble(plan: Any, t_avg: Any, fwd: Any, bwd: Any, wgrad: Any) -> Any:
    """Fill/drain time of one step's pipeline (seconds; 0 without pipelining): module table.

    ``t_avg``: the mean stage's time per micro-batch with its exposed communication;
    ``fwd``/``bwd``/``wgrad``: its forward, backward and weight-gradient compute.
    """
    p, v, sched = plan.pp, plan.vp, plan.schedule
    legacy = ops.where(p > 1, (p - 1) / v * t_avg, 0.0)
    if not ops.is_batch(sched):
        if sched in LEGACY:
            return legacy
        return _zero_bubble_family(sched, p, t_avg, fwd, bwd, wgrad) if p > 1 else 0.0
    newer = ops.logical_not(ops.isin(sched, LEGACY))
    if not ops.any_(newer):
        return legacy
    out = legacy
    for name in ("zero_bubble_h1", "zero_bubble_h2", "zero_bubble_v", "dualpipe", "dualpipev"):
        mask = ops.logical_and(sched == name, p > 1)
        if ops.any_(mask):
            out = ops.where(mask, _zero_bubble_family(name, p, t_avg, fwd, bwd, wgrad), out)
    return out


def _zero_bubble_family(name: str, p: Any, t_avg: Any, fwd: Any, bwd: Any, wgrad: Any) -> Any:
    """The bubble of one of the schedules that split the weight gradient off (module table)."""
    t_f, t_b, t_w = _split(t_avg, fwd, bwd, wgrad)
    if name == "zero_bubble_h1":
        return (p - 1) * ops.maximum(t_f + t_b - t_w, t_b)
    if name in ("zero_bubble_h2", "zero_bubble_v"):
        return (p - 1) * ops.maximum(t_f + t_b - 2.0 * t_w, 0.0)
    # DualPipe's F&B (an overlapped forward + backward pair) and B (a whole backward chunk).
    tail = ops.maximum(t_avg + (t_b + t_w) - 3.0 * t_w, 0.0)
    if name == "dualpipe":
        return (p / 2 - 1) * tail
    return (p - 1) * tail / 2  # dualpipev: chunks of half a rank


def in_flight(pp: Any, vp: Any, m: Any, schedule: Any = "auto") -> Any:
    """Micro-batches whose activations rank 0 holds, in units of one micro-batch on its layers."""
    extra = ops.where(vp > 1, (pp - 1) / (pp * vp), 0.0)
    legacy = ops.where(pp > 1, ops.minimum(pp, m) * (1.0 + extra), 1.0)
    if not ops.is_batch(schedule):
        if schedule in LEGACY or schedule == "zero_bubble_h1":
            return legacy  # ZB-H1 keeps 1F1B's p (vp 1: no interleaving extra)
        return ops.where(pp > 1, _newer_in_flight(schedule, pp, m), 1.0)
    out = legacy
    for name in ("zero_bubble_h2", "zero_bubble_v", "dualpipe", "dualpipev"):
        mask = ops.logical_and(schedule == name, pp > 1)
        if ops.any_(mask):
            out = ops.where(mask, _newer_in_flight(name, pp, m), out)
    return out


def _newer_in_flight(name: str, pp: Any, m: Any) -> Any:
    if name == "zero_bubble_h2":
        return ops.minimum(2 * pp - 1, m)   # ZB §2.2: (2p-1) M_B
    if name == "zero_bubble_v":
        return ops.minimum(pp, m)           # V-ZB: p (arXiv 2405.15362), its two chunks included
    if name == "dualpipe":
        return ops.minimum(pp + 1.0, m)     # DeepSeek-V3 Table 2: PP+1
    return ops.minimum(pp + 0.5, m)         # DualPipeV: PP+1 = 2p+1 half-rank micro-batches


def pairs_end_stages(schedule: Any) -> Any:
    """Whether ``schedule`` runs each rank's two stages (i and p-1-i) half of the micro-batches each,
    so that the end rank averages the first and the last stage (DualPipe; ``schedule.stage_times``).
    The only way the schedule changes a stage's work: the stage caches key on it, not on the name.
    """
    return schedule == "dualpipe"


def both_ends_on_first(plan: Any) -> Any:
    """Whether rank 0 holds the embedding and the LM head (pipelined ZB-V, DualPipe, DualPipeV)."""
    return ops.logical_and(plan.pp > 1, ops.isin(plan.schedule, BOTH_ENDS_ON_FIRST))


def rank0_params(plan: Any, params: Any, expert: Any, w: Any) -> tuple[Any, Any]:
    """(all, expert) parameters of the most loaded GPU under the plan's schedule.

    ``params``/``expert``: those of the bottleneck stage as 1F1B places them (its layers and
    the larger of the embedding and the head, ``schedule.stage_params``); ``w`` the
    workload (its embedding and head). DualPipe's rank holds two stages (2x); ZB-V, DualPipe
    and DualPipeV put both ends on rank 0.
    """
    sched = plan.schedule
    if not ops.is_batch(sched) and sched not in BOTH_ENDS_ON_FIRST:
        return params, expert
    ends = both_ends_on_first(plan)
    if not ops.any_(ends):
        return params, expert
    embedding, head = w.embedding.params, w.head.params
    copies = ops.where(sched == "dualpipe", 2.0, 1.0)
    layers = params - ops.maximum(embedding, head)
    return (ops.where(ends, copies * layers + embedding + head, params),
            ops.where(ends, copies * expert, expert))
