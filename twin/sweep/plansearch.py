"""Plan search: every valid parallel plan of a model on a cluster, ranked by step time.

The space: tensor (tp), pipeline (pp) and context (cp) degrees whose product divides the
GPU count, data parallelism dp = GPUs / (tp*pp*cp) dividing the global batch, expert
parallelism (MoE: ep dividing the experts, expert-tensor-parallel = tp or 1), every
micro-batch size dividing gbs/dp, every interleaving depth that runs (:func:`runnable_vps`:
Megatron-Core's interleaved schedule needs whole, equal virtual stages),
activation recomputation (none / selective / full) and optimizer-state sharding (none,
distributed optimizer = ZeRO-1, FSDP with and without resharding after forward = ZeRO-3
and ZeRO-2, and hybrid sharding: FSDP within each NVLink domain, :func:`hybrid_shard`).
A pipeline schedule stated in the base plan (``plan.schedule``) is searched
with the pipelined plans and the interleaving depths it runs (vp 1; 2 for ZB-V and
DualPipeV; the runnable depths from 2 for interleaved). Degrees are enumerated so the
divisibility rules hold by construction; every plan still goes through the twin's own
validation, and plans that do not fit in memory are counted, not ranked. By default the
search prunes: a plan slower than the ``top`` best found even without communication is
counted as pruned, not costed (``twin.core.run.pruning.Pruner``); the best are unchanged.
Precision, sequence length, gbs and overlap switches come from the base plan.

Points are (group, vp): a group fixes every field but vp, so the interleaving depths of a
group are evaluated in one batch
(``TwinModel.evaluate_points``, the same model as one scenario).
The best plans are re-evaluated with the full model (``Engine.evaluate``) for their
breakdowns.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from twin.core import schema
from twin.core.errors import SpecError
from twin.core.ops import Labels
from twin.core.point_set import PlanColumns
from twin.core.results import PRUNED_REASON
from twin.core.scenario_io import read_mapping, resolve_cluster, resolve_model, resolve_software
from twin.core.specs import DEFAULT_SOFTWARE, V_SCHEDULES, Calibration, Cluster, Model, Plan, Scenario, Software
from twin.sweep.job import EngineSettings, Job
from twin.sweep.reduce import SweepResult, nrows, row_dict
from twin.sweep.runner import run_job
from twin.sweep.sweep_points import PointBatch

if TYPE_CHECKING:
    from twin.engine import Engine

RECOMPUTE = ("none", "selective", "full")
# name -> (optimizer_sharding, fsdp_reshard_after_forward)
SHARDINGS: dict[str, tuple[str, bool]] = {
    "none": ("none", True), "distributed_optimizer": ("distributed_optimizer", True),
    "fsdp": ("fsdp", True), "fsdp-noreshard": ("fsdp", False), "hsdp": ("fsdp", True),
}
# Hybrid sharding (FSDP HYBRID_SHARD; Zhao et al., "PyTorch FSDP", VLDB 2023, §3.2): each state sharded over the
# data-parallel ranks of one scale-up domain, replicated across domains (plan.dp_shard).
HYBRID = "hsdp"


def hybrid_shard(tp: Any, cp: Any, dp: Any, domain_gpus: int) -> Any:
    """``plan.dp_shard`` of the search's hybrid sharding: the data-parallel ranks (of dp*cp) in
    one scale-up domain (ranks run tp innermost, then cp and dp), 0 where that is not a proper
    hybrid (one domain holds every replica's shards, or none): then it is plain FSDP.
    """
    k = np.maximum(domain_gpus // np.asarray(tp), 1)
    dpcp = np.asarray(dp) * np.asarray(cp)
    return np.where((k > 1) & (k < dpcp) & (dpcp % k == 0), k, 0)


# The share of HBM a plan twin plan ranks must leave free by default (--memory-headroom): what the
# twin's count of a step's memory leaves out, which real runs lose: the caching allocator's cached
# and fragmented blocks (ZeRO, Rajbhandari et al. SC'20 §3.2 and §6: fragmentation fails
# allocations "with over 30% of memory still available" in extreme cases; torchtitan's Llama 3.1
# 70B reserves 32-36% more than the twin counts, validation/reference torchtitan case, commit 7a24876),
# transient workspaces and NCCL buffers beyond its figures. 10%: vLLM's published default
# (gpu_memory_utilization 0.9, vLLM engine arguments, docs.vllm.ai: the rest kept for what its
# own count leaves out), the figure NeMo AutoModel's runs leave free by the twin's count
# (twin/reference/stack_defaults.py, fit_headroom), and no tuning here.
DEFAULT_MEMORY_HEADROOM = 0.10
# Tokens per step when no global batch is given: 4 Mi tokens, the order of magnitude of
# published large-model runs (GPT-3 3.2M, Llama 2 4M; Llama 3 405B 16M at 8K).
DEFAULT_TOKENS_PER_STEP = 4 * 2**20
_GROUP_FIELDS = ("tp", "pp", "cp", "ep", "etp", "mbs", "recompute", "sharding", "precision")


def divisors(n: int) -> list[int]:
    """Positive divisors of ``n``, ascending."""
    small, large = [], []
    d = 1
    while d * d <= n:
        if n % d == 0:
            small.append(d)
            if d != n // d:
                large.append(n // d)
        d += 1
    return small + large[::-1]


@dataclass(frozen=True)
class PlanSpace:
    """All plans to search for one (cluster, model, gbs): groups x interleaving depths."""

    name: str
    cluster: Cluster
    model: Model
    base: Plan
    calibration: Calibration
    groups: np.ndarray            # int64 (G, 9): tp, pp, cp, ep, etp(0 = tp), mbs, recompute, sharding, precision
    vp_counts: np.ndarray         # int64 (G,): the group's interleaving depths, vp_values[vp_start[g]:][:count]
    shardings: tuple[str, ...]
    precisions: tuple[str, ...]
    start: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0, np.int64))
    software: Software = DEFAULT_SOFTWARE
    vp_values: np.ndarray = field(repr=False, default_factory=lambda: np.ones(1, np.int64))  # per pp, its depths
    vp_start: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0, np.int64))  # (G,) into vp_values

    @property
    def total(self) -> int:
        """Plans in the space."""
        return int(self.vp_counts.sum())

    def source(self, engine: Engine | None = None) -> PlanSource:
        """The point source of this space (a job's recipe builds its own: ``twin.sweep.job.Recipe``)."""
        return PlanSource(self, engine)


def runnable_vps(layers: int, pp: int, schedule: str = "auto") -> list[int]:
    """The interleaving depths (vp) the search tries for ``pp`` stages of ``layers`` layers.

    Megatron-Core's interleaved 1F1B needs the layers of every pipeline stage to be a
    multiple of vp (NVIDIA Megatron-LM MR 2795, "flexible asymmetric VPP": "The current VPP
    mandates that the number of layers in each pipeline stage must be divisible by the VPP
    size"), i.e. pp*vp virtual stages of equal whole layers, the split the interleaved
    bubble (p-1)/(m*v) assumes; ``--account-for-embedding-in-pipeline-split`` and
    ``--account-for-loss-in-pipeline-split`` count the embedding and the loss as one layer
    each in that split, so (layers + 0, 1 or 2) must divide by pp*vp. Only the search is
    held to this: a stated plan (``twin predict``, a published run) keeps the permissive
    rule pp*vp <= layers, since uneven custom layouts run too (that MR's
    ``--pipeline-model-parallel-layout``). One-chunk schedules run vp 1; ZB-V and DualPipeV
    vp 2 with 2*pp <= layers (their implementations take any split of the chunks).
    """
    if pp == 1:
        return [1] if schedule == "auto" else []
    if schedule in V_SCHEDULES:
        return [2] if 2 * pp <= layers else []
    if schedule not in ("auto", "interleaved"):
        return [1]
    deep = [v for v in range(2, layers // pp + 1) if any((layers + extra) % (pp * v) == 0 for extra in (0, 1, 2))]
    return deep if schedule == "interleaved" else [1, *deep]


def build_space(cluster: Cluster, model: Model, base: Plan, *, name: str = "plans",
                calibration: Calibration | None = None, software: Software = DEFAULT_SOFTWARE,
                shardings: Sequence[str] = tuple(SHARDINGS),
                recompute: Sequence[str] = RECOMPUTE, precisions: Sequence[str] | None = None,
                max_tp: int | None = None, max_pp: int | None = None, max_cp: int | None = None,
                cp_values: Sequence[int] | None = None, ep_values: Sequence[int] | None = None) -> PlanSpace:
    """Enumerate the plan space (see module docstring); ``*_values`` restrict a degree to given values."""
    for s in shardings:
        if s not in SHARDINGS:
            raise SpecError("sharding", f"must be one of {', '.join(SHARDINGS)} (got {s!r})")
    for r in recompute:
        if r not in RECOMPUTE:
            raise SpecError("recompute", f"must be one of {', '.join(RECOMPUTE)} (got {r!r})")
    precisions = tuple(precisions or (base.precision,))
    n, gbs, L, seq = cluster.num_gpus, base.gbs, model.layers, model.seq_len
    # A stated pipeline schedule (base.schedule) needs pp > 1 and fixes the interleaving
    # depths: 1 (1F1B, ZB-H1/H2, DualPipe), 2 (ZB-V, DualPipeV) or the runnable 2.. (interleaved).
    kv, heads = model.kv_head_count, model.heads
    # Each (tp, pp, cp, ep, etp) group gets one block of rows: the product of its micro-batch
    # sizes, recompute policies, shardings and precisions in that order. The product depends only
    # on gbs // dp and whether hybrid sharding applies, so it is built once per such pair (building
    # it row by row in Python was 1.2 of the DeepSeek-V3 16K search's 5 s).
    rec_codes = [RECOMPUTE.index(r) for r in recompute]
    shard_codes = [(list(SHARDINGS).index(s), s == HYBRID) for s in shardings]
    prec_codes = [precisions.index(pr) for pr in precisions]
    tails: dict[tuple[int, bool], np.ndarray] = {}

    def tail(per_replica: int, hybrid: bool) -> np.ndarray:
        key = (per_replica, hybrid)
        found = tails.get(key)
        if found is None:
            combos = [(mbs, rc, sc, pc) for mbs in divisors(per_replica) for rc in rec_codes
                      for sc, is_hybrid in shard_codes if hybrid or not is_hybrid for pc in prec_codes]
            found = tails[key] = np.asarray(combos, np.int64).reshape(-1, 4)
        return found

    blocks: list[np.ndarray] = []
    counts: list[np.ndarray] = []
    vp_values: list[int] = []
    vp_at: dict[int, int] = {}     # pp -> where its depths start in vp_values
    vp_start: list[np.ndarray] = []
    for tp in divisors(n):
        if heads % tp or (kv % tp and tp % kv) or (max_tp and tp > max_tp):
            continue
        for pp in divisors(n // tp):
            if pp > L or (max_pp and pp > max_pp):
                continue
            vps = runnable_vps(L, pp, base.schedule)
            if not vps:
                continue
            nvp = len(vps)
            if pp not in vp_at:
                vp_at[pp] = len(vp_values)
                vp_values.extend(vps)
            for cp in divisors(n // (tp * pp)):
                if (cp > 1 and seq % (2 * cp)) or (max_cp and cp > max_cp) or (cp_values and cp not in cp_values):
                    continue
                if tp > 1 and (base.sequence_parallel is None or base.sequence_parallel) and seq % (tp * cp):
                    continue
                dp = n // (tp * pp * cp)
                if gbs % dp:
                    continue
                eps = [1]
                if model.moe is not None:
                    eps = [e for e in divisors(model.moe.experts) if e <= tp * cp * dp
                           and (not ep_values or e in ep_values)]
                etps = (0, 1) if model.moe is not None and tp > 1 else (0,)
                for ep in eps:
                    for etp in etps:
                        if (tp * cp * dp) % (ep * (etp or tp)):
                            continue
                        hybrid = bool(hybrid_shard(tp, cp, dp, cluster.scale_up.domain_gpus))
                        rest = tail(gbs // dp, hybrid)
                        if not len(rest):
                            continue
                        block = np.empty((len(rest), len(_GROUP_FIELDS)), np.int64)
                        block[:, :5] = (tp, pp, cp, ep, etp)
                        block[:, 5:] = rest
                        blocks.append(block)
                        counts.append(np.full(len(rest), nvp, np.int64))
                        vp_start.append(np.full(len(rest), vp_at[pp], np.int64))
    groups = np.concatenate(blocks) if blocks else np.zeros((0, len(_GROUP_FIELDS)), np.int64)
    vp_counts = np.concatenate(counts) if counts else np.zeros(0, np.int64)
    start = (np.concatenate([[0], np.cumsum(vp_counts)[:-1]]).astype(np.int64) if len(vp_counts)
             else np.zeros(0, np.int64))
    return PlanSpace(name=name, cluster=cluster, model=model, base=base, calibration=calibration or Calibration(),
                     groups=groups, vp_counts=vp_counts, shardings=tuple(SHARDINGS), precisions=precisions,
                     start=start, software=software, vp_values=np.asarray(vp_values or [1], np.int64),
                     vp_start=np.concatenate(vp_start) if vp_start else np.zeros(0, np.int64))


class PlanSource:
    """Points of a :class:`PlanSpace` (one per process)."""

    def __init__(self, space: PlanSpace, engine: Engine | None = None) -> None:
        self.space = space
        self.total = space.total
        self._base = PlanColumns.from_plans([space.base])

    def batch(self, start: int, stop: int) -> PointBatch:
        """Plans ``start`` .. ``stop - 1``: each a group's degrees with one interleaving depth."""
        sp = self.space
        ids = np.arange(start, stop, dtype=np.int64)
        n = len(ids)
        g = np.searchsorted(sp.start, ids, side="right") - 1
        rows = sp.groups[g]
        zeros = np.zeros(n, np.int64)
        plan = self._base.take(zeros)
        sharding = Labels.of([SHARDINGS[s][0] for s in sp.shardings])   # one code per search sharding
        reshards = np.asarray([SHARDINGS[s][1] for s in sp.shardings])
        plan = dataclasses.replace(
            plan, tp=rows[:, 0].copy(), pp=rows[:, 1].copy(), cp=rows[:, 2].copy(), ep=rows[:, 3].copy(),
            etp=rows[:, 4].copy(), mbs=rows[:, 5].copy(), recompute=Labels(rows[:, 6], RECOMPUTE),
            optimizer_sharding=sharding[rows[:, 7]], fsdp_reshard_after_forward=reshards[rows[:, 7]],
            precision=Labels(rows[:, 8], sp.precisions), dp=zeros.copy(),
            vp=sp.vp_values[sp.vp_start[g] + ids - sp.start[g]])
        hsdp = np.asarray([s == HYBRID for s in sp.shardings])[rows[:, 7]]
        if hsdp.any():
            dp = sp.cluster.num_gpus // (rows[:, 0] * rows[:, 1] * rows[:, 2])
            k = hybrid_shard(rows[:, 0], rows[:, 2], dp, sp.cluster.scale_up.domain_gpus)
            plan = dataclasses.replace(plan, dp_shard=np.where(hsdp, k, 0).astype(np.int64))
        etp = rows[:, 4]
        columns = {"etp": np.where(etp == 0, rows[:, 0], etp)} if sp.model.moe is not None else {}
        return PointBatch(ids=ids, models=[sp.model], model_ix=zeros, clusters=[sp.cluster], cluster_ix=zeros,
                          calibrations=[sp.calibration], calibration_ix=zeros, plan=plan,
                          error_ix=np.full(n, -1, np.int64), errors=[], columns=columns, software=sp.software)


# ----------------------------------------------------------------- inputs
def load_model(value: Any, engine: Engine) -> Model:
    """A model from a preset name or a YAML/JSON file (a model mapping or a scenario with ``model``)."""
    if isinstance(value, str) and not _is_file(value):
        return resolve_model(value, engine.catalog, "model")
    data = read_mapping(value) if isinstance(value, str | Path) else value
    if isinstance(data, Mapping) and "model" in data and "layers" not in data:
        data = data["model"]
    return resolve_model(data, engine.catalog, "model")


def load_cluster(value: Any, gpus: int, engine: Engine) -> Cluster:
    """A cluster from a system preset name or a file (a cluster mapping or a scenario with ``cluster``)."""
    if isinstance(value, str) and not _is_file(value):
        data: Any = {"system": value}
    else:
        data = read_mapping(value) if isinstance(value, str | Path) else value
        if isinstance(data, Mapping) and "cluster" in data:
            data = data["cluster"]
        if not isinstance(data, Mapping):
            raise SpecError("system", f"must be a system preset name or a cluster mapping (got {data!r})")
        data = dict(data)
    data["num_gpus"] = gpus
    return resolve_cluster(data, engine.catalog, "cluster")


def _is_file(value: str) -> bool:
    return value.endswith((".yaml", ".yml", ".json")) or Path(value).is_file()


def default_gbs(seq_len: int) -> int:
    """Sequences per step giving about DEFAULT_TOKENS_PER_STEP tokens (a power of two)."""
    target = max(1, DEFAULT_TOKENS_PER_STEP // max(1, seq_len))
    return 1 << (target.bit_length() - 1)


def space_for(engine: Engine, model: Any, system: Any, gpus: int, *, gbs: int | None = None,
              seq_len: int | None = None, plan: Mapping[str, Any] | None = None, software: Any = None,
              **options: Any) -> PlanSpace:
    """The plan space of ``model`` on ``gpus`` GPUs of ``system`` (names or files); ``software``:
    the framework stack (a preset name or mapping, default ``megatron-core-te``).
    """
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise SpecError("gpus", f"must be an integer >= 1 (got {gpus!r})")
    m = model if isinstance(model, Model) else load_model(model, engine)
    if seq_len is not None:
        if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
            raise SpecError("seq_len", f"must be an integer >= 1 (got {seq_len!r})")
        m = dataclasses.replace(m, seq_len=seq_len)
    c = system if isinstance(system, Cluster) else load_cluster(system, gpus, engine)
    if c.num_gpus != gpus:
        c = dataclasses.replace(c, num_gpus=gpus)
    if gbs is not None and (isinstance(gbs, bool) or not isinstance(gbs, int) or gbs < 1):
        raise SpecError("gbs", f"must be an integer >= 1 (got {gbs!r})")
    base_data = {"gbs": gbs or default_gbs(m.seq_len), **dict(plan or {})}
    base = schema.load(Plan, base_data, "plan")
    # cluster-level rules first: a bad cluster is an input error, not an empty search
    from twin.core.specs import validate_cluster, validate_model

    validate_cluster(c)
    validate_model(m)
    engine.check_cluster(c)  # and each fabric model's rules
    name = f"{m.name or 'model'} on {gpus} x {c.name or c.gpu.name}"
    stack = resolve_software(software, engine.catalog) if software is not None else DEFAULT_SOFTWARE
    return build_space(c, m, base, name=name, software=stack, **options)


def memory_risk(memory: Mapping[str, Any], headroom: float = DEFAULT_MEMORY_HEADROOM) -> dict[str, Any]:
    """How near a plan's memory (an estimate's ``memory`` in GiB) is to HBM: the share used, the
    GiB left free and its risk: ``tight`` where it leaves less than ``headroom`` of HBM free
    (what runs lose beyond the twin's count: :data:`DEFAULT_MEMORY_HEADROOM`), else ``ok``.
    """
    total, capacity = float(memory["total_gib"]), float(memory["capacity_gib"])
    share = total / capacity if capacity > 0 else float("inf")
    return {"hbm_share": share, "free_gib": capacity - total, "headroom": headroom,
            "risk": "ok" if share <= 1.0 - headroom else "tight"}


def plan_job(space: PlanSpace, *, top: int = 5, metric: str = "step_time_s", order: str = "min",
             settings: EngineSettings | None = None, keep_rows: bool = False, memory_headroom: float = 0.0,
             prune: bool = True) -> Job:
    """A job that searches ``space`` (``memory_headroom``: fraction of HBM a plan must leave free;
    ``prune``: skip plans that provably cannot be among the ``top`` fastest, with
    ``metric`` step_time_s and ``order`` min: ``twin.core.run.pruning.Pruner``).
    """
    if isinstance(memory_headroom, bool) or not isinstance(memory_headroom, int | float) \
            or not 0.0 <= memory_headroom < 1.0:
        raise SpecError("memory_headroom", f"must be a fraction in [0, 1) (got {memory_headroom!r})")
    return Job(recipe=space, total=space.total, metric=metric, order=order, top=top, keep_rows=keep_rows,
               engine=settings or EngineSettings(), name=space.name, memory_headroom=float(memory_headroom),
               prune=prune)


@dataclass
class PlanSearchResult:
    """Search outcome: counts, the best plans and their full estimates."""

    space: PlanSpace
    result: SweepResult
    estimates: list[dict[str, Any]]
    seconds: float
    memory_headroom: float = 0.0     # the share of HBM the search's plans had to leave free

    @property
    def pruned(self) -> int:
        """Plans that fit but were not costed in full (slower than the best even without communication)."""
        return self.result.counts.get(PRUNED_REASON, 0)

    def plans(self) -> list[dict[str, Any]]:
        """The best plans (rows) with their full estimates attached."""
        out = []
        for i in range(nrows(self.result.top)):
            row = row_dict(self.result.top, i)
            row["estimate"] = self.estimates[i] if i < len(self.estimates) else None
            if row["estimate"] is not None:  # judged against the default headroom too when the search asked less
                row["memory_risk"] = memory_risk(row["estimate"]["memory"],
                                                 max(self.memory_headroom, DEFAULT_MEMORY_HEADROOM))
            out.append(row)
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        r = self.result
        return {"search": self.space.name, "num_gpus": self.space.cluster.num_gpus, "gbs": self.space.base.gbs,
                "seq_len": self.space.model.seq_len, "plans_searched": r.done, "plans_total": r.total,
                "feasible": r.feasible, "pruned": self.pruned,
                "memory_headroom": self.memory_headroom,
                "infeasible_by_reason": dict(sorted(r.counts.items(), key=lambda kv: -kv[1])),
                "seconds": self.seconds, "cancelled": r.cancelled, "executor": r.executor,
                "top": self.plans()}


def plan_scenario(space: PlanSpace, row: Mapping[str, Any]) -> Scenario:
    """The full scenario of one result row."""
    sharding, reshard = SHARDINGS.get(str(row["sharding"]), (str(row["sharding"]), True))
    dp_shard = 0
    if str(row["sharding"]) == HYBRID:
        dp = space.cluster.num_gpus // (int(row["tp"]) * int(row["pp"]) * int(row["cp"]))
        dp_shard = int(hybrid_shard(int(row["tp"]), int(row["cp"]), dp, space.cluster.scale_up.domain_gpus))
    etp = row.get("etp")
    plan = dataclasses.replace(space.base, tp=int(row["tp"]), pp=int(row["pp"]), vp=int(row["vp"]),
                               cp=int(row["cp"]), ep=int(row["ep"]), mbs=int(row["mbs"]), gbs=int(row["gbs"]),
                               recompute=str(row["recompute"]), precision=str(row["precision"]),
                               optimizer_sharding=sharding, fsdp_reshard_after_forward=reshard, dp=None,
                               dp_shard=dp_shard,
                               etp=None if etp is None or int(etp) == int(row["tp"]) else int(etp))
    return Scenario(cluster=space.cluster, model=space.model, plan=plan, calibration=space.calibration,
                    name=space.name, software=space.software)


def search_plans(engine: Engine, space: PlanSpace, *, top: int = 5, executor: Any = "inline",
                 ray_address: str | None = None, cancel: Any = None, settings: EngineSettings | None = None,
                 metric: str = "step_time_s", order: str = "min", memory_headroom: float = 0.0,
                 runner: Callable[[Job], SweepResult] | None = None, prune: bool = True) -> PlanSearchResult:
    """Search ``space``; the best ``top`` plans re-evaluated with the full model.

    ``prune`` (default): plans whose compute and optimizer step alone exceed the ``top``-th
    best step time found are counted as pruned instead of costed in full; the best ``top``
    are the same as without pruning (``twin.core.run.pruning.Pruner``).

    ``runner``: runs the job instead of :func:`~twin.sweep.runner.run_job` (the CLI passes
    one that draws a progress bar from the job's events).
    """
    t0 = time.perf_counter()
    job = plan_job(space, top=top, metric=metric, order=order, settings=settings, memory_headroom=memory_headroom,
                   prune=prune)
    if runner is not None:
        result = runner(job)
    else:
        result = run_job(job, engine=engine, executor=executor, ray_address=ray_address, cancel=cancel)
    estimates = [engine.evaluate(plan_scenario(space, row_dict(result.top, i))).to_dict()
                 for i in range(nrows(result.top))]
    return PlanSearchResult(space=space, result=result, estimates=estimates, seconds=time.perf_counter() - t0,
                            memory_headroom=float(memory_headroom))
