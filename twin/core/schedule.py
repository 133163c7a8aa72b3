"""How layers split over pipeline stages, what one micro-batch costs the bottleneck stage,
and how the pipeline schedule turns micro-batch time into step time.

Pipeline schedules (the core owns them; strategies only say what they send):

- without pipelining the step runs ``m`` micro-batches back to back: ``m * t_mb``;
- pipelined: ``m * t_mb + bubble``, where ``t_mb`` is a micro-batch on the bottleneck
  stage and the bubble the plan's schedule leaves (``twin.core.pipelines``) from the mean
  stage's passes: for 1F1B (Narayanan et al. 2019, PipeDream-Flush) and interleaved
  virtual stages (Narayanan et al. 2021, SC'21 §2.2) ``(p-1)/v * t_avg``, i.e. the
  fraction (p-1)/(m*v) of the ideal time, ``t_avg`` a micro-batch on the mean stage (both
  with the communication exposed per micro-batch); zero-bubble and DualPipe schedules
  also use the weight-gradient part of the backward.

The host (the framework stack, :class:`~twin.core.training_specs.Software`): the host issues
kernels asynchronously, so a layer pass costs the larger of its device time and the host
time to issue it (kernels x host cost per kernel, or one graph replay per captured
sub-layer); the same holds for a stage's ends (embedding, LM head and loss kernels, the
per-micro-batch host work and, with pipelining, the send/recv launches and their sync).
Large layers hide the host entirely; small models, small micro-batches and high TP on
eager stacks are host-bound (time flat in the micro-batch size). A layer pass's host time and
what an MoE layer's tokens-per-expert sync does to it are ``twin.core.host``'s.

Written once for one scenario and for a batch (``twin.core.ops``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from twin.core import ops, pipelines
from twin.core.compute import Device, gemm_fwd_time, high_precision, sublayer_times, sublayer_wgrad_time
from twin.core.host import layer_pass_s
from twin.core.interfaces import StageTimes
from twin.core.memory import recomputed_layers, stage_layers
from twin.core.specs import DEFAULT_SOFTWARE, Model, Software, default_recompute_modules, recompute_module
from twin.core.workload import ACT_BYTES, Workload


def stage_times(plan: Any, model: Model, dev: Device, w: Workload, sw: Software = DEFAULT_SOFTWARE) -> StageTimes:
    """Forward/backward/recompute time of one micro-batch on the bottleneck stage.

    The bottleneck is the slowest of the first stage (its layers + the embedding), the
    last (its layers + the LM head) and, for p > 2, a middle stage. Every layer pass and
    every stage end costs the larger of its device and its host time (module docstring).
    """
    frozen = plan.trainable == "lora"
    passes = _layer_passes(dev, w, frozen, plan.moe_dispatcher)
    fwd_l, bwd_l, attn_l, attn_bl, _, _, _, _, wgrad_l, _, gemm_f_l, moe_f_l = passes  # the ends: the stage helpers
    L, p = model.layers, plan.pp
    t_layer_f, t_layer_b = layer_pass_s(sw, w, fwd_l / L, bwd_l / L, moe_f_l / L)
    t_attn = attn_l / L
    # The weight-gradient GEMMs of a layer and of the stage ends (no longer than the pass they belong to).
    t_layer_w = ops.minimum(wgrad_l / L, t_layer_b)
    # Layers a low-precision recipe keeps in bf16 (Megatron-Core --first-last-layers-bf16:
    # the first and the last layers of the model, so on the first and the last stage):
    # what each costs over a low-precision layer.
    d_f: Any = 0.0
    d_b: Any = 0.0
    if ops.any_(plan.bf16_layers_start + plan.bf16_layers_end > 0):
        k_f, k_b, k_moe = _kept_passes(dev, w, frozen, plan.moe_dispatcher)
        kept_f, kept_b = layer_pass_s(sw, w, k_f / L, k_b / L, k_moe / L)
        d_f, d_b = kept_f - t_layer_f, kept_b - t_layer_b
    layer = (t_layer_f, t_layer_b, t_layer_w, d_f, d_b)
    piped = p > 1
    # Host work at a stage's ends per micro-batch and pass: the edge kernels (embedding,
    # final norm, LM head, loss), the per-micro-batch framework work and, with pipelining,
    # the send/recv launches (half each in the forward and the backward pass).
    edges = (sw.edge_fwd_ops * sw.dispatch_us * 1e-6, sw.edge_bwd_ops * sw.dispatch_us * 1e-6,
             0.5e-6 * sw.microbatch_us)
    if ops.is_batch(p) or piped:
        got_p = _piped_stage(plan, L, piped, 0.5e-6 * sw.p2p_us, passes, layer, edges)
    if ops.is_batch(p) or not piped:
        got_1 = _single_stage(plan, L, passes, layer, edges)
    if ops.is_batch(p):
        layers, fwd, bwd, avg, avg_f, avg_w = (np.where(piped, a, b) for a, b in zip(got_p, got_1, strict=True))
    else:
        layers, fwd, bwd, avg, avg_f, avg_w = got_p if piped else got_1
    recompute = _recompute_s(plan, model, dev, w, t_attn, t_layer_f, layers)
    gemm_f = gemm_f_l / L
    # The step's host tail (grad-norm and inf-check syncs, optimizer launches): see Software.
    host_step = 1e-6 * (sw.step_us + sw.optimizer_us_per_layer * layers)
    return StageTimes(fwd_s=fwd, bwd_s=bwd, recompute_s=recompute, attn_fwd_s=t_attn * layers,
                      attn_bwd_s=attn_bl / L * layers,
                      layers=layers, layer_fwd_s=t_layer_f, layer_bwd_s=t_layer_b, gemm_fwd_s=gemm_f,
                      avg_stage_s=avg + ops.where(piped, recompute, 0.0), host_step_s=host_step,
                      avg_fwd_s=avg_f, avg_wgrad_s=avg_w)


def _piped_stage(plan: Any, L: int, piped: Any, p2p_half: Any, passes: tuple[Any, ...], layer: tuple[Any, ...],
                 edges: tuple[Any, ...]) -> tuple[Any, ...]:
    """With pipelining: (layers, forward, backward) of the bottleneck stage, and the mean
    stage's (micro-batch, forward, weight gradient) (:func:`stage_times`; ``p2p_half``: half
    the host time of a micro-batch's send/recv launches, ``passes``: :func:`_layer_passes`,
    ``layer``: a layer's forward, backward and weight gradient and a kept layer's extra
    forward and backward, ``edges``: the edge kernels' forward and backward and half the
    per-micro-batch host work).
    """
    _, _, _, _, ef, eb, hf, hb, _, ends_w, _, _ = passes
    t_layer_f, t_layer_b, t_layer_w, d_f, d_b = layer
    edge_f, edge_b, mb_half = edges
    p = plan.pp
    per_layer = t_layer_f + t_layer_b
    # Each end stage issues about half of the edge kernels (embedding | head and loss).
    ends = mb_half + p2p_half
    first, middle, last = stage_layers(L, p, plan.pp_first_layers, plan.pp_last_layers)
    # Kept layers beyond the first (last) stage's own are not moved to the next stage.
    k_first, k_last = ops.minimum(plan.bf16_layers_start, first), ops.minimum(plan.bf16_layers_end, last)
    ef_p = ops.maximum(ef, 0.5 * edge_f + ends) + k_first * d_f
    eb_p = ops.maximum(eb, 0.5 * edge_b + ends) + k_first * d_b
    hf_p = ops.maximum(hf, 0.5 * edge_f + ends) + k_last * d_f
    hb_p = ops.maximum(hb, 0.5 * edge_b + ends) + k_last * d_b
    head, emb, mid = hf_p + hb_p, ef_p + eb_p, 2.0 * ends
    # The slowest candidate stage; ties keep the earlier one (first, last, middle).
    t_first, t_last = first * per_layer + ef_p + eb_p, last * per_layer + hf_p + hb_p
    pick_last = t_last > t_first
    n_layers = ops.where(pick_last, last, first)
    extra_f, extra_b = ops.where(pick_last, hf_p, ef_p), ops.where(pick_last, hb_p, eb_p)
    t_end = ops.where(pick_last, t_last, t_first)
    # DualPipe: rank i holds stages i and p-1-i and runs half of the micro-batches through
    # each (DeepSeek-V3 report §3.2.1 and Figure 5: micro-batches fed from both ends; the
    # shallowest layers with the embedding and the deepest with the head on one rank), so
    # the end rank's work per micro-batch is the mean of the first and the last stage.
    dual = ops.logical_and(piped, pipelines.pairs_end_stages(plan.schedule))
    if ops.any_(dual):
        n_layers = ops.where(dual, 0.5 * (first + last), n_layers)
        extra_f, extra_b = ops.where(dual, 0.5 * (ef_p + hf_p), extra_f), ops.where(dual, 0.5 * (eb_p + hb_p),
                                                                                  extra_b)
        t_end = ops.where(dual, 0.5 * (t_first + t_last), t_end)
    if ops.any_(p > 2):
        pick_mid = ops.logical_and(p > 2, middle * per_layer + mid > t_end)
        n_layers = ops.where(pick_mid, middle, n_layers)
        extra_f, extra_b = ops.where(pick_mid, ends, extra_f), ops.where(pick_mid, ends, extra_b)
    layers_p = np.asarray(n_layers, np.float64) if ops.is_batch(n_layers) else float(n_layers)
    fwd_p, bwd_p = n_layers * t_layer_f + extra_f, n_layers * t_layer_b + extra_b
    avg_p = (L * per_layer + head + emb + ops.maximum(p - 2, 0) * mid) / p
    avg_f_p = (L * t_layer_f + hf_p + ef_p + ops.maximum(p - 2, 0) * ends) / p
    avg_w_p = (L * t_layer_w + ends_w) / p
    return layers_p, fwd_p, bwd_p, avg_p, avg_f_p, avg_w_p


def _single_stage(plan: Any, L: int, passes: tuple[Any, ...], layer: tuple[Any, ...],
                  edges: tuple[Any, ...]) -> tuple[Any, ...]:
    """Without pipelining, the one stage: what :func:`_piped_stage` gives (the mean stage is it)."""
    _, _, _, _, ef, eb, hf, hb, _, ends_w, _, _ = passes
    t_layer_f, t_layer_b, t_layer_w, d_f, d_b = layer
    edge_f, edge_b, mb_half = edges
    layers_1 = float(L)
    kept = plan.bf16_layers_start + plan.bf16_layers_end
    fwd_1 = L * t_layer_f + ops.maximum(ef + hf, edge_f + mb_half) + kept * d_f
    bwd_1 = L * t_layer_b + ops.maximum(eb + hb, edge_b + mb_half) + kept * d_b
    avg_1 = fwd_1 + bwd_1
    avg_f_1, avg_w_1 = fwd_1, L * t_layer_w + ends_w
    return layers_1, fwd_1, bwd_1, avg_1, avg_f_1, avg_w_1


def _recompute_s(plan: Any, model: Model, dev: Device, w: Workload, t_attn: Any, t_layer_f: Any, layers: Any) -> Any:
    """Seconds the bottleneck stage's ``layers`` recompute per micro-batch (``plan.recompute``)."""
    rc = plan.recompute
    # The default modules (the attention core) repeat t_attn; others _selective_layer_s.
    selective = t_attn if ops.all_(default_recompute_modules(plan.recompute_modules)) else \
        _selective_layer_s(plan, model, dev, w, t_attn)
    return ops.where(rc == "full", recomputed_layers("full", plan.recompute_layers, layers) * t_layer_f,
                     ops.where(rc == "selective", layers * selective, 0.0))


# The layer passes of stage_times by (device, workload, frozen, dispatcher): they do not
# depend on the pipeline split, the recomputation or the batch, which scenarios of one
# workload vary. Keyed by the workload's identity (workloads are cached by value,
# ``workload.build_workload``) and holding it, so an id is never that of another object.
_PASSES: dict[Any, tuple[Workload, tuple[Any, ...]]] = {}
_PASSES_LIMIT = 4096


def _passes_key(kind: str, dev: Device, w: Workload, frozen: Any, dispatcher: Any) -> Any:
    """The cache key of one scenario's passes; None for a batch's (built anew)."""
    if ops.is_batch(frozen, dispatcher, w.tokens):
        return None
    return (kind, dev, id(w), frozen, dispatcher)


def _memo_passes(key: Any, w: Workload, build: Callable[[], tuple[Any, ...]]) -> tuple[Any, ...]:
    if key is None:
        return build()
    try:
        hit = _PASSES.get(key)
    except TypeError:  # a batch's device (array fields) is not hashable
        return build()
    if hit is not None and hit[0] is w:
        return hit[1]
    got = build()
    if len(_PASSES) > _PASSES_LIMIT:
        _PASSES.clear()
    _PASSES[key] = (w, got)
    return got


def _layer_passes(dev: Device, w: Workload, frozen: Any, dispatcher: Any) -> tuple[Any, ...]:
    """Summed over the layers of ``w`` and for its ends: (forward, backward, attention-core
    forward, attention-core backward, embedding forward, embedding backward, head forward,
    head backward, layers' weight gradient, ends' weight gradient, layers' GEMM forward, MoE
    sub-layers' forward).
    """
    def build() -> tuple[Any, ...]:
        fwd_l = bwd_l = attn_l = attn_bl = moe_f = 0.0
        for kind, count in w.counts.items():
            f, b, a, ab = sublayer_times(dev, w.sublayers[kind], frozen, dispatcher)
            fwd_l += f * count
            bwd_l += b * count
            attn_l += a * count
            attn_bl += ab * count
            if kind == "moe":
                moe_f = f * count
        ef, eb, _, _ = sublayer_times(dev, w.embedding, frozen)
        hf, hb, _, _ = sublayer_times(dev, w.head, frozen, dispatcher)   # MTP blocks hold MoE layers
        wgrad_l: Any = 0.0
        for kind, count in w.counts.items():
            wgrad_l = wgrad_l + sublayer_wgrad_time(dev, w.sublayers[kind], frozen) * count
        ends_w = sublayer_wgrad_time(dev, w.embedding, frozen) + sublayer_wgrad_time(dev, w.head, frozen)
        gemm_f = sum(sum(gemm_fwd_time(dev, g) for g in w.sublayers[k].gemms) * c for k, c in w.counts.items())
        return fwd_l, bwd_l, attn_l, attn_bl, ef, eb, hf, hb, wgrad_l, ends_w, gemm_f, moe_f
    return _memo_passes(_passes_key("layers", dev, w, frozen, dispatcher), w, build)


def _kept_passes(dev: Device, w: Workload, frozen: Any, dispatcher: Any) -> tuple[Any, ...]:
    """(forward, backward, MoE sub-layers' forward) summed over the layers of ``w`` kept in bf16
    (``high_precision``).
    """
    def build() -> tuple[Any, ...]:
        d_f: Any = 0.0
        d_b: Any = 0.0
        d_moe: Any = 0.0
        dev16 = high_precision(dev)
        for kind, count in w.counts.items():
            f, b, _, _ = sublayer_times(dev16, w.sublayers[kind], frozen, dispatcher)
            d_f += f * count
            d_b += b * count
            if kind == "moe":
                d_moe = f * count
        return d_f, d_b, d_moe
    return _memo_passes(_passes_key("kept", dev, w, frozen, dispatcher), w, build)


def _selective_layer_s(plan: Any, model: Model, dev: Device, w: Workload, t_attn: Any) -> Any:
    """Seconds per mean layer that selective recomputation of ``plan.recompute_modules`` repeats.

    core_attn: the attention core's forward (Korthikanti et al. 2022 §5). layernorm: each
    norm again, memory-bound (it reads and writes one hidden vector per token). mla_up_proj:
    the MLA up-projection GEMMs' forward. moe_act: the expert activation, memory-bound (it
    reads the fc1 output and writes the activation per routed copy). mlp / moe: the dense
    MLP's / the whole MoE layer's forward (the MoE layer's all-to-all is the expert-parallel
    strategy's: it counts a third pass). Each memory-bound kernel takes at least the
    device's minimum kernel time.
    """
    L = w.layers
    tokens, h = w.tokens, model.hidden
    h_sp = ops.where(plan.sp, h / plan.tp, h)
    out: Any = ops.where(recompute_module(plan, "core_attn"), t_attn, 0.0)
    norms = sum(c for k, c in w.counts.items() if k in ("attention", "mlp", "moe")) / L
    norm_s = ops.maximum(2.0 * ACT_BYTES * tokens * h_sp / dev.hbm_Bps, dev.kernel_min_s)
    out = out + ops.where(recompute_module(plan, "layernorm"), norms * norm_s, 0.0)
    if "attention" in w.counts:
        up_s = sum(gemm_fwd_time(dev, g) for g in w.sublayers["attention"].gemms if g.up_projection)
        out = out + ops.where(recompute_module(plan, "mla_up_proj"), up_s * w.counts["attention"] / L, 0.0)
    moe = model.moe
    if "moe" in w.counts and moe is not None:
        mult = 3 if model.gated_mlp else 2
        routed = moe.top_k * moe.busiest_load * ops.where(plan.sp, plan.expert_tp / plan.tp, 1.0)
        act_s = ops.maximum(ACT_BYTES * tokens * routed * mult * moe.expert_ffn / plan.expert_tp / dev.hbm_Bps,
                            dev.kernel_min_s)
        # moe recomputes the whole layer's forward (its activation included), else moe_act.
        act = ops.where(recompute_module(plan, "moe_act"), act_s * w.counts["moe"] / L, 0.0)
        whole = recompute_module(plan, "moe")
        if ops.any_(whole):
            layer_f = sublayer_times(dev, w.sublayers["moe"], False, plan.moe_dispatcher)[0]
            act = ops.where(whole, layer_f * w.counts["moe"] / L, act)
        out = out + act
    dense = recompute_module(plan, "mlp")
    if "mlp" in w.counts and ops.any_(dense):
        # The dense MLP's forward again (its sub-layer's norm and residual kernels counted with
        # it: a few memory-bound kernels more than the checkpointed MLP itself runs).
        mlp_f = sublayer_times(dev, w.sublayers["mlp"], False, plan.moe_dispatcher)[0]
        out = out + ops.where(dense, mlp_f * w.counts["mlp"] / L, 0.0)
    return out


def stage_params(plan: Any, w: Workload, layers: Any) -> tuple[Any, Any]:
    """Parameters (all, expert) on one GPU of the bottleneck stage of ``layers`` layers.

    The embedding and the LM head sit on the first and the last stage: with pipelining the
    larger of the two counts, without it both.
    """
    L = w.layers
    params = sum(w.sublayers[k].params * c for k, c in w.counts.items()) / L * layers
    expert = sum(w.sublayers[k].expert_params * c for k, c in w.counts.items()) / L * layers
    ends = ops.where(plan.pp > 1, ops.maximum(w.embedding.params, w.head.params), w.embedding.params + w.head.params)
    return params + ends, expert


def pipeline_time(plan: Any, m: Any, t_mb: Any, t_avg: Any, stage: StageTimes) -> tuple[Any, Any]:
    """(pipeline time, bubble) of one step: ``m`` micro-batches of ``t_mb`` plus the fill/drain
    of the plan's schedule (``twin.core.pipelines.bubble``) from the mean stage's ``t_avg``
    and its passes in ``stage``.
    """
    p = plan.pp
    bubble = pipelines.bubble(plan, t_avg, stage.avg_fwd_s, stage.avg_stage_s - stage.avg_fwd_s, stage.avg_wgrad_s)
    return ops.where(p > 1, m * t_mb + bubble, m * t_mb), bubble
