"""Which collectives each built-in strategy issues, where and how often (``twin.core.step_anatomy``).

A strategy's :class:`~twin.core.interfaces.Terms` sum its communication over a micro-batch and
a step; a trace needs the collectives one by one. The operations, groups, sizes and times come
from the strategy itself: every ``ctx.cost`` call it makes while evaluated is recorded
(:class:`Call`). What the terms do not say is how many of each it issues and where in the
step; that is this table, one recipe per built-in strategy, written from each plugin's own
docstring and formula (the plugin module named in each recipe). A recipe is checked against
the strategy's terms: the bytes and seconds of its collectives must add up to the terms'
(``twin.core.run.anatomy``), and a strategy without a recipe, or whose recipe no longer adds
up, gets the generic description (one collective per micro-batch and one per step, of its
bytes), with a note saying so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from twin.core.collective_types import bus_factor
from twin.core.interfaces import EvalContext
from twin.core.step_anatomy import Issue
from twin.core.training_specs import recompute_module


@dataclass(frozen=True, slots=True)
class Call:
    """One ``ctx.cost`` call of a strategy: operation, per-rank size, dimension, group size,
    the twin's time for it and the algorithm it chose.
    """

    op: str
    size_bytes: float
    dimension: str
    n: int
    time_s: float
    algorithm: str


# (op, dimension, placement, count per unit): one row of a recipe, its call found by (op, dimension)
# (the largest such call: the data-parallel strategy also costs its last bucket, which it does not
# issue on its own).
Row = tuple[str, str, str, float]
Recipe = Callable[[EvalContext], Sequence[Row] | None]


def _tensor(ctx: EvalContext) -> list[Row]:
    """plugins/tensor_parallel.py: per sub-layer and pass an all-reduce (with sequence parallelism
    an all-gather and a reduce-scatter of the same bytes), full recomputation repeating the
    forward's; the vocab-parallel embedding's once forward and once backward per micro-batch.
    """
    w = ctx.workload
    sub = sum(w.counts.values()) / w.layers
    ops_ = ("all_gather", "reduce_scatter") if ctx.plan.sp else ("all_reduce",)
    rows: list[Row] = []
    for op in ops_:
        rows += [(op, "tp", "layer_fwd", sub), (op, "tp", "layer_bwd", sub),
                 (op, "tp", "microbatch_fwd", 1.0), (op, "tp", "microbatch_bwd", 1.0)]
        if ctx.plan.recompute == "full":
            rows.append((op, "tp", "layer_recompute", sub))
    return rows


def _pipeline(ctx: EvalContext) -> list[Row]:
    """plugins/pipeline_parallel.py: activations forward and gradients backward across each
    stage boundary, once per model chunk and micro-batch.
    """
    return [("send_recv", "pp", "send_fwd", 1.0), ("send_recv", "pp", "send_bwd", 1.0)]


def _data(ctx: EvalContext) -> list[Row]:
    """plugins/data_parallel.py: once per step the gradients reduced (all-reduce, or with a sharded
    optimizer a reduce-scatter, and the shard all-reduced across the replicas with hybrid
    sharding) after the last backward, and with a sharded optimizer the updated parameters
    all-gathered before the first forward; dense parameters over dp, expert ones over edp.
    """
    sharded = ctx.plan.optimizer_sharding != "none"
    rows: list[Row] = []
    for dim in ("dp", "edp"):
        if sharded:
            rows += [("reduce_scatter", dim, "step_end", 1.0), ("all_gather", dim, "step_start", 1.0)]
        else:
            rows.append(("all_reduce", dim, "step_end", 1.0))
    rows.append(("all_reduce", "dpr", "step_end", 1.0))
    return rows


def _fsdp(ctx: EvalContext) -> list[Row]:
    """plugins/fsdp.py: per micro-batch the weights all-gathered before the forward and again
    before the backward, the gradients reduce-scattered after it (dense over dp, experts over
    edp); with hybrid sharding the gradient shard all-reduced across the replicas once per step.
    """
    rows: list[Row] = []
    for dim in ("dp", "edp"):
        rows += [("all_gather", dim, "chunk_fwd", 1.0), ("all_gather", dim, "chunk_bwd", 1.0),
                 ("reduce_scatter", dim, "chunk_grad", 1.0)]
    rows.append(("all_reduce", "dpr", "step_end", 1.0))
    return rows


def _context(ctx: EvalContext) -> list[Row] | None:
    """plugins/context_parallel.py, per attention sub-layer: ring attention (p2p) passes the K/V
    block cp-1 times forward (again when recomputed) and K/V with their gradients (2x) cp-1 times
    backward; all_gather gathers K/V before each forward and backward and reduce-scatters their
    gradients; a2a (Ulysses) runs two all-to-alls (Q/K/V in, the output out) per pass.
    """
    w, plan = ctx.workload, ctx.plan
    attn = w.counts.get("attention", 0) / w.layers
    again = plan.recompute == "full"
    kind = plan.cp_comm_type
    if kind == "p2p":
        steps = attn * (plan.cp - 1)
        # The forward's block and the backward's (twice the bytes) are two calls of one op: the
        # recipe row takes the largest, so the forward's is listed by its own size below.
        return [("send_recv:fwd", "cp", "layer_fwd", steps), ("send_recv", "cp", "layer_bwd", steps),
                *((("send_recv:fwd", "cp", "layer_recompute", steps),) if again else ())]
    if kind == "all_gather":
        return [("all_gather", "cp", "layer_fwd", attn), ("all_gather", "cp", "layer_bwd", attn),
                ("reduce_scatter", "cp", "layer_bwd", attn),
                *((("all_gather", "cp", "layer_recompute", attn),) if again else ())]
    if kind == "a2a":
        rows: list[Row] = []
        for op in ("all_to_all", "all_to_all:small"):
            rows += [(op, "cp", "layer_fwd", attn), (op, "cp", "layer_bwd", attn)]
            if again:
                rows.append((op, "cp", "layer_recompute", attn))
        return rows
    return None


def _expert(ctx: EvalContext) -> list[Row] | None:
    """plugins/expert_parallel.py: per MoE sub-layer a dispatch and a combine all-to-all forward
    and two backward, and two more where the layer's forward is recomputed (full recomputation
    or selective ``moe``). DeepEP's deduplicated dispatch is not costed through ``ctx.cost``:
    no recipe (the generic description).
    """
    plan, w = ctx.plan, ctx.workload
    if plan.moe_dispatcher == "deepep":
        return None
    moe = w.counts.get("moe", 0) / w.layers
    again = plan.recompute == "full" or bool(recompute_module(plan, "moe"))
    rows: list[Row] = [("all_to_all", "ep", "layer_fwd", 2.0 * moe), ("all_to_all", "ep", "layer_bwd", 2.0 * moe)]
    if again:
        rows.append(("all_to_all", "ep", "layer_recompute", 2.0 * moe))
    return rows


# A strategy without a recipe or a recorded call: its dimension's usual collective.
GENERIC_OPS = {"ep": "all_to_all"}

RECIPES: dict[str, Recipe] = {
    "tensor": _tensor, "pipeline": _pipeline, "data": _data, "fsdp": _fsdp, "context": _context, "expert": _expert,
}


def find_call(calls: Sequence[Call], op: str, dim: str) -> Call | None:
    """The call a recipe row names: ``op`` over ``dim``, the largest of them; ``op:fwd`` / ``op:small``
    the smallest (the ring's forward block, Ulysses' output all-to-all).
    """
    base, _, which = op.partition(":")
    found = [c for c in calls if c.op == base and c.dimension == dim and c.size_bytes > 0 and c.n > 1]
    if not found:
        return None
    if which:
        return min(found, key=lambda c: c.size_bytes)
    return max(found, key=lambda c: c.size_bytes)


def issues_of(strategy: str, reported: str, rows: Sequence[Row], calls: Sequence[Call]) -> list[Issue]:
    """The :class:`Issue` of each recipe row whose call the strategy made (a group of one rank, or a
    call not made, issues nothing).
    """
    out = []
    for op, dim, at, per in rows:
        call = find_call(calls, op, dim)
        if call is None or per <= 0:
            continue
        sent = call.size_bytes * float(bus_factor(call.op, call.n))
        out.append(Issue(strategy, reported, dim, call.op, call.size_bytes, call.time_s, call.algorithm, at,
                         float(per), sent))
    return out


def generic_issues(strategy: str, dimension: str, calls: Sequence[Call], n_of: Callable[[str], int],
                   terms: Any) -> list[Issue]:
    """A strategy without a recipe: one collective per micro-batch (after its backward) and one per
    step (after the last backward) carrying its bytes and seconds; the operation and group of its
    first recorded call, else its dimension's usual collective over its own group (an all-to-all
    for expert parallelism, an all-reduce otherwise).
    """
    op, dim = (calls[0].op, calls[0].dimension) if calls else (GENERIC_OPS.get(dimension, "all_reduce"), dimension)
    algo = calls[0].algorithm if calls else ""
    n = max(1, n_of(dim))
    factor = float(bus_factor(op, n)) or 1.0
    out = []
    for at, nbytes, secs in (("microbatch_bwd", terms.bytes_per_microbatch, terms.issued_per_microbatch_s),
                             ("step_end", terms.bytes_per_step, terms.issued_per_step_s)):
        if float(nbytes) > 0 or float(secs) > 0:
            out.append(Issue(strategy, dimension, dim, op, float(nbytes) / factor, float(secs), algo, at, 1.0,
                             float(nbytes)))
    return out
