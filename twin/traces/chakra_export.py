"""``twin export chakra``: a scenario's training step as MLCommons Chakra execution traces.

One trace per pipeline rank (every tp/cp/dp rank of a stage runs the same step: the rank
classes of the twin's symmetric groups), written from ``Engine.step_anatomy``: the estimate's
own stage passes and strategy terms, taken apart. Each trace holds one training step of that
rank in its schedule's order (1F1B, or Megatron-LM's interleaved 1F1B: Narayanan et al. 2021,
SC'21 §2.2; Megatron-Core ``forward_backward_pipelining_with_interleaving``: (p-r-1)*2 +
(v-1)*p warm-up forwards on rank r, then one forward and one backward, then the cool-down):

- COMP_NODE per layer and pass (the stage's mean layer), plus one per chunk and pass for the
  stage's ends (embedding, LM head, per-micro-batch host work) and the optimizer step;
  ``duration_micros`` their time (ASTRA-sim replays it: ``Workload::issue_replay``);
- COMM_COLL_NODE per collective: ``comm_type`` (CollectiveCommType), ``comm_size`` (bytes per
  rank in the twin's convention: an all-gather's gathered output, a reduce-scatter's input, an
  all-to-all's send buffer), ``pg_name`` (a group of ``comm_groups.json``, ASTRA-sim's
  ``--comm-group-configuration``), ``duration_micros`` the twin's time for it;
- COMM_SEND_NODE / COMM_RECV_NODE for pipeline activations and gradients and ring attention:
  ``comm_src``, ``comm_dst``, ``comm_tag`` (matched by tag), ``comm_size``;
- ``data_deps``: compute and the blocking collectives (tensor, expert, context parallel, a
  micro-batch's embedding) in one chain in schedule order; receives before the chunk that
  needs them; sends, gradient reductions and parameter gathers after the pass that produces
  them, off the chain; the optimizer after every gradient reduction. A strategy whose
  per-micro-batch communication the twin mostly hides (exposed under half of issued: tensor
  parallelism with Transformer Engine's comm-GEMM overlap) is off the chain too, after the
  pass it follows: a replay hides it, as the estimate does but for its exposed remainder.

Attribute names and types are the ones ASTRA-sim's feeder reads (astra-sim
``workload/feeder_v3/et_feeder_node_attr.h`` @ 2aa2bbd1: is_cpu_op, num_ops, tensor_size,
comm_type, comm_priority, comm_size, comm_src, comm_dst, comm_tag, pg_name; ``Workload.cc``
@ 0383c203: ``{prefix}.{rank}.et`` per rank, pg_name "" or "0" the group of all ranks) and
those Chakra's generator writes (``int64_val`` comm_type, ``uint64_val`` comm_size, bool
is_cpu_op). Each node also carries ``twin_dimension`` (the estimate's dimension it counts
under), ``twin_group`` (the group it runs over) and ``twin_strategy`` (all ignored by ASTRA-sim),
so a reader can sum a dimension as the estimate does.

Class traces name the rank with every other coordinate 0 (``{name}.stage{r}.et``); ``all_ranks``
writes ``{name}.{rank}.et`` for every GPU with its own peers and groups, as ASTRA-sim loads them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twin.core.errors import SpecError, TooLargeError
from twin.core.step_anatomy import SPLIT_OVER_CHUNKS, Issue, StageClass, StepAnatomy
from twin.traces import chakra_schema as cs

# One file per GPU is what ASTRA-sim loads; past this many GPUs the class traces are the export.
MAX_ALL_RANKS = 1024
# Collectives on the compute chain (blocking: the next pass waits for them).
CHAINED = ("layer_fwd", "layer_bwd", "layer_recompute", "microbatch_fwd", "microbatch_bwd")


def schedule_order(p: int, v: int, m: int, rank: int) -> list[tuple[str, int, int]]:
    """The passes of pipeline rank ``rank`` in one step: ("F" | "B", micro-batch, chunk).

    Forwards go through micro-batches in groups of p, chunk by chunk; backwards the same with the
    chunks reversed (Megatron-Core's get_model_chunk_id); warm-up forwards (p-r-1) for 1F1B,
    (p-r-1)*2 + (v-1)*p interleaved, then alternately one forward and one backward.
    """
    fwd, bwd = [], []
    for start in range(0, m, p):
        group = range(start, min(start + p, m))
        for c in range(v):
            fwd += [(mb, c) for mb in group]
            bwd += [(mb, v - 1 - c) for mb in group]
    total = m * v
    warm = min(total, (p - rank - 1) if v == 1 else (p - rank - 1) * 2 + (v - 1) * p)
    order = [("F", *x) for x in fwd[:warm]]
    for i in range(total - warm):
        order.append(("F", *fwd[warm + i]))
        order.append(("B", *bwd[i]))
    order += [("B", *x) for x in bwd[total - warm:]]
    return order


def chunk_layers(layers: int, v: int) -> list[int]:
    """A rank's layers over its v chunks (the first chunks one more where v does not divide them)."""
    base, extra = divmod(layers, v)
    return [base + (1 if c < extra else 0) for c in range(v)]


def group_index(rank: int, n: int, stride: int) -> int:
    """Which of a dimension's groups (n ranks ``stride`` apart, tiling the ranks) holds ``rank``:
    the groups numbered by their lowest rank.
    """
    return (rank // (n * stride)) * stride + rank % stride


def groups_of(a: StepAnatomy, dims: list[str]) -> tuple[dict[str, int], dict[str, list[int]]]:
    """(first group id per dimension, every group's ranks by id): ASTRA-sim's comm-group file."""
    base: dict[str, int] = {}
    table: dict[str, list[int]] = {}
    next_id = 1  # 0 is the group of every rank (Workload::extract_comm_group)
    for dim in dims:
        n, stride = a.groups[dim]
        base[dim] = next_id
        for leader in range(a.num_gpus):
            if (leader // stride) % n == 0:
                table[str(next_id + group_index(leader, n, stride))] = [leader + k * stride for k in range(n)]
        next_id += a.num_gpus // n
    return base, table


@dataclass
class _Writer:
    """Builds one rank's nodes: ids, the compute chain, durations rounded without drift."""

    pb: Any
    rank: int
    pg: dict[str, str]
    nodes: list[Any] = field(default_factory=list)
    chain: int | None = None
    exact: dict[str, float] = field(default_factory=dict)
    rounded: dict[str, int] = field(default_factory=dict)

    def _micros(self, key: str, seconds: float) -> int:
        """``seconds`` in whole microseconds such that each stream's running total stays the
        rounded exact total (error diffusion: per-node rounding never accumulates).
        """
        self.exact[key] = self.exact.get(key, 0.0) + seconds * 1e6
        total = round(self.exact[key])
        got = total - self.rounded.get(key, 0)
        self.rounded[key] = total
        return max(0, got)

    def node(self, name: str, kind: int, seconds: float, key: str, deps: list[int], chained: bool,
             attrs: list[Any]) -> int:
        node = self.pb.Node(id=len(self.nodes), name=name, type=kind, duration_micros=self._micros(key, seconds))
        if chained and self.chain is not None:
            deps = [*deps, self.chain]
        node.data_deps.extend(sorted(set(deps)))
        node.attr.append(cs.attr("is_cpu_op", False, "bool_val"))
        node.attr.extend(attrs)
        self.nodes.append(node)
        if chained:
            self.chain = node.id
        return node.id

    def compute(self, name: str, seconds: float, deps: list[int] = ()) -> int:  # type: ignore[assignment]
        return self.node(name, cs.COMP_NODE, seconds, "compute", list(deps), True,
                         [cs.attr("twin_dimension", "compute", "string_val")])

    def collective(self, name: str, issue: Issue, size: float, seconds: float, deps: list[int],
                   chained: bool) -> int:
        attrs = [cs.attr("comm_type", cs.COMM_TYPES[issue.op], "int64_val"),
                 cs.attr("comm_size", round(size), "uint64_val"),
                 cs.attr("pg_name", self.pg[issue.dimension], "string_val"),
                 cs.attr("twin_dimension", issue.reported, "string_val"),
                 cs.attr("twin_group", issue.dimension, "string_val"),
                 cs.attr("twin_strategy", issue.strategy, "string_val")]
        return self.node(name, cs.COMM_COLL_NODE, seconds, issue.reported, deps, chained, attrs)

    def p2p(self, name: str, send: bool, issue: Issue, peer: int, tag: int, seconds: float, deps: list[int],
            chained: bool) -> int:
        src, dst = (self.rank, peer) if send else (peer, self.rank)
        attrs = [cs.attr("comm_src", src, "int32_val"), cs.attr("comm_dst", dst, "int32_val"),
                 cs.attr("comm_tag", tag, "int32_val"), cs.attr("comm_size", round(issue.size_bytes), "uint64_val"),
                 cs.attr("twin_dimension", issue.reported, "string_val"),
                 cs.attr("twin_group", issue.dimension, "string_val"),
                 cs.attr("twin_strategy", issue.strategy, "string_val")]
        # The twin's time is the sender's (what it sends, in its bytes); the receive waits for it.
        key = issue.reported if send else issue.reported + ":recv"
        return self.node(name, cs.COMM_SEND_NODE if send else cs.COMM_RECV_NODE, seconds if send else 0.0, key,
                         deps, chained, attrs)


class _RankTrace:
    """One rank's step (module docstring): the passes of its schedule, node by node."""

    def __init__(self, a: StepAnatomy, stage: StageClass, rank: int, pg: dict[str, str]) -> None:
        self.a, self.stage, self.rank = a, stage, rank
        self.w = _Writer(cs.schema(), rank, pg)
        self.v = a.vp
        self.layers = chunk_layers(stage.layers, self.v)
        self.issues = [i for part in stage.parts for i in part.issues]
        self.by_at: dict[str, list[Issue]] = {}
        for i in self.issues:
            self.by_at.setdefault(i.at, []).append(i)
        # Strategies whose per-micro-batch communication the twin mostly hides (exposed under half of
        # issued: TP comm-GEMM overlap, prefetched gathers): off the chain, after the pass they follow.
        self.hidden = {p.strategy for p in stage.parts if p.issued_per_microbatch_s > 0
                       and p.exposed_per_microbatch_s < 0.5 * p.issued_per_microbatch_s}
        self.async_done: list[int] = []     # reductions the optimizer waits for
        self.pending: dict[int, list[int]] = {}  # per chunk: step_start gathers its first forward waits for
        self.last_bwd = {c: max((k for k, op in enumerate(self.order()) if op[0] == "B" and op[2] == c), default=-1)
                         for c in range(self.v)}

    def order(self) -> list[tuple[str, int, int]]:
        return schedule_order(self.a.pp, self.v, self.a.microbatches, self.stage.rank)

    # ---------------------------------------------------------------- peers
    def _pp_peer(self, forward: bool) -> int:
        n, stride = self.a.groups["pp"]
        r = self.stage.rank
        if forward:
            return self.rank + stride if r < n - 1 else self.rank - (n - 1) * stride
        return self.rank - stride if r > 0 else self.rank + (n - 1) * stride

    def _ring_peer(self, dim: str, forward: bool) -> int:
        n, stride = self.a.groups[dim]
        j = (self.rank // stride) % n
        if forward:
            return self.rank + stride if j < n - 1 else self.rank - (n - 1) * stride
        return self.rank - stride if j > 0 else self.rank + (n - 1) * stride

    def _tag(self, mb: int, g: int, backward: bool) -> int:
        """A pipeline transfer's tag: the same on both ends (micro-batch, sending virtual stage, direction)."""
        return ((mb * self.a.pp * self.v + g) * 2 + int(backward)) + 1

    # ---------------------------------------------------------------- collectives
    def _share(self, issue: Issue, c: int) -> float:
        """Chunk ``c``'s share of a placement sized for all the rank's chunks (by layers)."""
        if issue.at not in SPLIT_OVER_CHUNKS:
            return 1.0
        total = sum(self.layers)
        return self.layers[c] / total if total else 1.0 / self.v

    def _emit(self, at: str, label: str, c: int, count: float = 1.0, deps: list[int] = (),  # type: ignore[assignment]
              chained: bool | None = None) -> list[int]:
        """The collectives of placement ``at`` (each ``per`` x ``count`` times; a fraction is one
        more collective of that fraction of the bytes and seconds).
        """
        out: list[int] = []
        for issue in self.by_at.get(at, ()):
            on_chain = (at in CHAINED and issue.strategy not in self.hidden) if chained is None else chained
            deps = list(deps) if on_chain or self.w.chain is None else [*deps, self.w.chain]
            share = self._share(issue, c)
            if share <= 0:  # a chunk without layers: none of the rank's parameters to move
                continue
            for k, frac in _pieces(issue.per * count):
                name = f"{label} {issue.strategy} {issue.op} {issue.dimension}#{k}"
                size, secs = issue.size_bytes * share * frac, issue.time_s * share * frac
                if issue.op == "send_recv":  # a ring step: send to the next rank, receive from the previous
                    tag = 1_000_000 + len(self.w.nodes)
                    s = self.w.p2p(name + " send", True, issue, self._ring_peer(issue.dimension, True), tag, secs,
                                   list(deps), False)
                    out.append(self.w.p2p(name + " recv", False, issue, self._ring_peer(issue.dimension, False), tag,
                                          0.0, [s], on_chain))
                else:
                    out.append(self.w.collective(name, issue, size, secs, list(deps), on_chain))
        return out

    # ---------------------------------------------------------------- passes
    def _forward(self, mb: int, c: int) -> None:
        a, st, r, v = self.a, self.stage, self.stage.rank, self.v
        g = c * a.pp + r
        label = f"mb{mb} chunk{c}"
        deps: list[int] = [*self.pending.pop(c, [])]
        if g > 0 and "send_fwd" in self.by_at:
            issue = self.by_at["send_fwd"][0]
            deps.append(self.w.p2p(f"{label} recv activations", False, issue, self._pp_peer(False),
                                   self._tag(mb, g - 1, False), 0.0, [], False))
        deps += self._emit("chunk_fwd", f"{label} fwd", c, chained=False)
        self.w.compute(f"{label} fwd ends", (st.fwd_s - st.layers * st.layer_fwd_s) / v, deps)
        if c == 0:
            self._emit("microbatch_fwd", f"{label} fwd", c)
        for layer in range(self.layers[c]):
            self.w.compute(f"{label} fwd layer{layer}", st.layer_fwd_s)
            self._emit("layer_fwd", f"{label} fwd layer{layer}", c)
        if g < a.pp * v - 1:
            for issue in self.by_at.get("send_fwd", ()):
                self.w.p2p(f"{label} send activations", True, issue, self._pp_peer(True), self._tag(mb, g, False),
                           issue.time_s, [self.w.chain] if self.w.chain is not None else [], False)

    def _backward(self, k: int, mb: int, c: int) -> None:
        a, st, r, v = self.a, self.stage, self.stage.rank, self.v
        g = c * a.pp + r
        label = f"mb{mb} chunk{c}"
        deps: list[int] = []
        if g < a.pp * v - 1 and "send_bwd" in self.by_at:
            issue = self.by_at["send_bwd"][0]
            deps.append(self.w.p2p(f"{label} recv gradients", False, issue, self._pp_peer(True),
                                   self._tag(mb, g + 1, True), 0.0, [], False))
        deps += self._emit("chunk_bwd", f"{label} bwd", c, chained=False)
        self.w.compute(f"{label} bwd ends", (st.bwd_s - st.layers * st.layer_bwd_s) / v, deps)
        recompute = st.recompute_s / st.layers if st.layers else 0.0
        for layer in reversed(range(self.layers[c])):
            if recompute > 0:
                self.w.compute(f"{label} recompute layer{layer}", recompute)
                self._emit("layer_recompute", f"{label} recompute layer{layer}", c)
            self.w.compute(f"{label} bwd layer{layer}", st.layer_bwd_s)
            self._emit("layer_bwd", f"{label} bwd layer{layer}", c)
        if c == 0:
            self._emit("microbatch_bwd", f"{label} bwd", c)
        done = [self.w.chain] if self.w.chain is not None else []
        self.async_done += self._emit("chunk_grad", f"{label} grad", c, deps=done, chained=False)
        if k == self.last_bwd[c]:
            self.async_done += self._emit("step_end", f"chunk{c} step", c, deps=done, chained=False)
        if g > 0:
            for issue in self.by_at.get("send_bwd", ()):
                self.w.p2p(f"{label} send gradients", True, issue, self._pp_peer(False), self._tag(mb, g, True),
                           issue.time_s, done, False)

    def nodes(self) -> list[Any]:
        for c in range(self.v):
            self.pending[c] = self._emit("step_start", f"chunk{c} step", c, chained=False)
        for k, (kind, mb, c) in enumerate(self.order()):
            if kind == "F":
                self._forward(mb, c)
            else:
                self._backward(k, mb, c)
        self.w.compute("optimizer step", self.a.optimizer_s, self.async_done)
        return self.w.nodes


def _pieces(count: float) -> Iterator[tuple[int, float]]:
    """``count`` collectives as (index, fraction of one): whole ones, then the remainder."""
    whole = int(count + 1e-9)
    for k in range(whole):
        yield k, 1.0
    rest = count - whole
    if rest > 1e-9:
        yield whole, rest


@dataclass(frozen=True)
class Exported:
    """What an export wrote: the directory, the class trace files, the manifest."""

    out: Path
    files: tuple[Path, ...]
    manifest: Path
    anatomy: StepAnatomy


def metadata(a: StepAnatomy, stage: StageClass, rank: int) -> Any:
    """A trace's GlobalMetadata: the schema version and where the trace comes from."""
    pb = cs.schema()
    return pb.GlobalMetadata(version=cs.SCHEMA_VERSION, attr=[
        cs.attr("producer", "fabric-twin twin export chakra", "string_val"),
        cs.attr("schema_source", cs.SCHEMA_SOURCE, "string_val"),
        cs.attr("scenario", a.scenario, "string_val"),
        cs.attr("pipeline_rank", stage.rank, "int64_val"),
        cs.attr("rank", rank, "int64_val"),
        cs.attr("bottleneck", stage.bottleneck, "bool_val")])


def export(a: StepAnatomy, out: str | Path, *, all_ranks: bool = False, name: str | None = None) -> Exported:
    """Write ``a``'s traces under ``out`` (module docstring): the class traces, ``comm_groups.json``,
    ``manifest.json``; with ``all_ranks``, ``ranks/{name}.{rank}.et`` for every GPU too.
    """
    out = Path(out)
    if all_ranks and a.num_gpus > MAX_ALL_RANKS:
        raise TooLargeError("--all-ranks", f"writes one trace per GPU; {a.num_gpus} GPUs is over {MAX_ALL_RANKS} "
                                           "(the class traces, one per pipeline rank, are written without it)")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise SpecError(str(out), f"cannot create the output directory: {err.strerror or err}") from None
    prefix = name or a.scenario or "twin"
    dims = sorted({i.dimension for s in a.stages for p in s.parts for i in p.issues})
    base, table = groups_of(a, dims)
    pp_n, pp_stride = a.groups["pp"]

    def pg_of(rank: int) -> dict[str, str]:
        return {d: str(base[d] + group_index(rank, *a.groups[d])) for d in dims}

    files, classes = [], []
    for stage in a.stages:
        rank = stage.rank * pp_stride
        nodes = _RankTrace(a, stage, rank, pg_of(rank)).nodes()
        path = out / f"{prefix}.stage{stage.rank}.et"
        cs.write_trace(path, metadata(a, stage, rank), nodes)
        files.append(path)
        classes.append({"file": path.name, "pipeline_rank": stage.rank, "representative_rank": rank,
                        "ranks": a.num_gpus // pp_n, "bottleneck": stage.bottleneck, "layers": stage.layers,
                        "nodes": len(nodes), "totals": class_totals(a, stage)})
    if all_ranks:
        (out / "ranks").mkdir(exist_ok=True)
        by_rank = {s.rank: s for s in a.stages}
        for rank in range(a.num_gpus):
            stage = by_rank[(rank // pp_stride) % pp_n]
            cs.write_trace(out / "ranks" / f"{prefix}.{rank}.et", metadata(a, stage, rank),
                           _RankTrace(a, stage, rank, pg_of(rank)).nodes())
    (out / "comm_groups.json").write_text(json.dumps(table))
    manifest = out / "manifest.json"
    manifest.write_text(json.dumps({
        "scenario": a.scenario, "schema": cs.SCHEMA_SOURCE, "schema_version": cs.SCHEMA_VERSION,
        "num_gpus": a.num_gpus, "schedule": a.schedule, "microbatches": a.microbatches, "vp": a.vp,
        "degrees": {"tp": a.tp, "cp": a.cp, "ep": a.ep, "dp": a.dp, "pp": a.pp},
        "groups": {d: {"size": a.groups[d][0], "stride": a.groups[d][1], "first_id": base[d]} for d in dims},
        "comm_groups": "comm_groups.json", "classes": classes,
        "all_ranks": f"ranks/{prefix}.{{rank}}.et" if all_ranks else None,
        "estimate": a.estimate, "notes": list(a.notes)}, indent=1))
    return Exported(out, tuple(files), manifest, a)


def class_totals(a: StepAnatomy, stage: StageClass) -> dict[str, Any]:
    """What one class's trace adds up to by construction (seconds, bytes sent): the figures a
    reader checks it against (``trace_totals``) and the estimate.
    """
    m = a.microbatches
    compute = m * (stage.fwd_s + stage.bwd_s)
    issued: dict[str, float] = {}
    sent: dict[str, float] = {}
    for part in stage.parts:
        issued[part.dimension] = issued.get(part.dimension, 0.0) + part.issued_per_microbatch_s * m \
            + part.issued_per_step_s
        sent[part.dimension] = sent.get(part.dimension, 0.0) + part.bytes_per_microbatch * m + part.bytes_per_step
    return {"compute_s": compute, "recompute_s": m * stage.recompute_s, "optimizer_s": a.optimizer_s,
            "comm_issued_s": issued, "bytes_per_step": sent}
