"""The plan's cross-field rules as a table: the degrees must divide what they split, a
knob must apply to the plan, the schedule, the recipe, the layout and the cluster must
fit together.

Each rule (:class:`PlanRule`) names the field it blames, tests one scenario's plan or a
batch's (numpy columns, ``twin.core.point_set``: a test combines per-point bools with ``&``
and ``|``, which bools and bool arrays share, and negates and chooses through
``twin.core.ops``), and gives its message's template and, when asked, the template's
values. Rules come in groups (:class:`RuleGroup`) that apply only where a plan sets a knob
away from its default (or the model has the part they check): what no point sets no point
can break. :func:`plan_rules` walks the table for both paths: :func:`validate_plan` raises
the first broken rule of one scenario; the batch path (``TwinModel._evaluate_points``)
codes each point with the first rule it breaks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from operator import attrgetter
from typing import Any, NamedTuple

import numpy as np

from twin.core import ops
from twin.core.cluster_specs import GPU, Cluster
from twin.core.errors import SpecError
from twin.core.training_specs import (
    DEFAULT_LORA_RANK,
    Model,
    Plan,
    default_recompute_modules,
    names_module,
)

RuleCheck = tuple[str, Any, str, "Callable[[], dict[str, Any]]"]


class Rule:
    """One broken cross-field rule of a plan: the field it names, where it is broken, and why.

    ``bad`` is a bool (one scenario) or a bool array (a batch); ``message`` formats
    ``template`` with ``values`` (numbers, or arrays for a batch) of one point.
    """

    __slots__ = ("bad", "field", "template", "values")

    def __init__(self, field: str, bad: Any, template: str, values: dict[str, Any] | None = None) -> None:
        self.field = field
        self.bad = bad
        self.template = template
        self.values = values or {}

    def message(self, i: int | None = None) -> str:
        """The rule's message for one scenario, or for point ``i`` of a batch."""
        if i is None:
            return self.template.format(**self.values)
        return self.template.format(**{k: _at(v, i) for k, v in self.values.items()})


def _at(value: Any, i: int) -> Any:
    if isinstance(value, ops.Labels):
        return value.name(i)
    item = getattr(value, "item", None)
    if item is not None and getattr(value, "ndim", 0) > 0:
        return value[i].item()
    return value


def _any_point(column: Any, test: Callable[[Any], Any]) -> bool:
    """Whether ``test`` holds for any point of a batch's plan column.

    The rules of a knob that only a value other than its default can break are skipped for
    a batch where no point sets one, as they are for one scenario: what no point can break
    needs no check per point (on the 1M-point benchmark sweep such checks took 70 of 144 ms of
    rule checks, ~7% of the sweep, measured). A constant column (``ops.uniform``) is read at
    its first row.
    """
    return ops.any_(test(column[:1] if ops.uniform(column) else column))


def _stated(column: Any, default: Any) -> bool:
    """Whether any point of a batch's plan column is set away from ``default`` (:func:`_any_point`)."""
    return _any_point(column, lambda values: values != default)


class PlanFacts:
    """What the rules read: the plan (one, or a batch's columns), the model, the cluster (one,
    or a column view), whether it is a batch, and the degrees and sizes derived once.

    ``given``: dp is stated (per point for a batch), ``derived``: it is not; ``dp``: stated
    or derived (num_gpus / (tp*pp*cp)); ``m``: micro-batches per step, ``expert_group``:
    ep*etp (both computed when first read).
    """

    __slots__ = ("_expert_group", "_m", "batch", "cluster", "cp", "derived", "dp", "ep", "given", "mbs_dp", "model",
                 "mp", "n", "plan", "pp", "tp", "vp")

    def __init__(self, plan: Any, model: Model, cluster: Any) -> None:
        self.plan, self.model, self.cluster = plan, model, cluster
        n = self.n = cluster.num_gpus
        tp, pp, cp = self.tp, self.pp, self.cp = plan.tp, plan.pp, plan.cp
        self.vp, self.ep = plan.vp, plan.ep
        mp = self.mp = tp * pp * cp
        batch = self.batch = isinstance(tp, np.ndarray) or isinstance(n, np.ndarray)  # ops.is_batch, inline
        if batch:
            given = self.given = plan.dp > 0
            self.derived = ops.logical_not(given)
            dp = self.dp = ops.where(given, plan.dp, n // mp)
        elif plan.dp is None:
            self.given, self.derived = False, True
            dp = self.dp = n // mp
        else:
            self.given, self.derived = True, False
            dp = self.dp = plan.dp
        self.mbs_dp = plan.mbs * dp
        self._m: Any = None
        self._expert_group: Any = None

    @property
    def m(self) -> Any:
        """Micro-batches per step: gbs / (mbs*dp)."""
        if self._m is None:
            self._m = self.plan.gbs // ops.maximum(self.mbs_dp, 1)
        return self._m

    @property
    def expert_group(self) -> Any:
        """GPUs of one expert-parallel group: ep*etp."""
        if self._expert_group is None:
            self._expert_group = self.ep * self.plan.expert_tp
        return self._expert_group


Test = Callable[[PlanFacts], Any]
Values = Callable[[PlanFacts], dict[str, Any]]


class PlanRule(NamedTuple):
    """One rule: the field it blames (below the plan's path), where it is broken (a bool, or
    one per point), the message's template and its values (None: the template has none).
    """

    field: str
    broken: Test
    template: str
    values: Values | None = None


class RuleGroup(NamedTuple):
    """Rules checked together, in their order, where ``when`` holds (None: always).

    ``when`` reads one scenario or a batch: for a knob's rules, whether any point sets the
    knob (:func:`_stated`); for the rules of a model part, whether the model has it.
    ``knobs``: plan fields (dotted for a nested one) at whose defaults none of the rules is
    broken, whatever the model and cluster: one scenario that keeps them all skips the
    group without asking ``when`` or the rules (a batch asks them: its reasons and the
    order they are found in are the rules').
    """

    knobs: tuple[str, ...]
    when: Test | None
    rules: tuple[PlanRule, ...]


def plan_rules(plan: Any, model: Model, cluster: Any, path: str = "plan") -> Iterator[RuleCheck]:
    """The plan's cross-field rules in the order they are checked (:data:`PLAN_RULES`):
    (field, where it is broken, message template, the template's values when asked).

    ``plan`` and ``cluster`` may be one scenario's or a batch's (``twin.core.point_set``);
    rules after a broken one are evaluated for a batch too (their points are already
    counted against the first broken rule). For one scenario only broken rules are yielded;
    the values are computed only for a broken rule.
    """
    facts = PlanFacts(plan, model, cluster)
    batch = facts.batch
    for knobs, defaults, when, rules in _GROUPS:
        if knobs is not None and not batch and knobs(plan) == defaults:
            continue  # one scenario that keeps the group's knobs at their defaults breaks none of its rules
        if when is not None and not when(facts):
            continue
        for field, broken, template, values in rules:
            bad = broken(facts)
            if batch or bad:
                yield f"{path}.{field}", bad, template, dict if values is None else partial(values, facts)


def validate_plan(plan: Plan, model: Model, cluster: Cluster, path: str = "plan") -> None:
    """Rules spanning plan, model and cluster: divisibility of every degree."""
    for field_path, bad, template, values in plan_rules(plan, model, cluster, path):
        if bad:
            raise SpecError(field_path, Rule(field_path, bad, template, values()).message())


# ------------------------------------------------------------------ when a group applies
def _layout_set(f: PlanFacts) -> bool:
    return _stated(f.plan.pp_first_layers, 0) or _stated(f.plan.pp_last_layers, 0)


def _recipe_set(f: PlanFacts) -> bool:
    plan = f.plan
    return _stated(plan.recipe, "auto") or _stated(plan.bf16_layers_start, 0) or _stated(plan.bf16_layers_end, 0)


def _modules_set(f: PlanFacts) -> bool:
    return _any_point(f.plan.recompute_modules, lambda values: ops.logical_not(default_recompute_modules(values)))


def _any_is(knob: str, value: str) -> Test:
    """Whether any point sets plan field ``knob`` (dotted for a nested one) to ``value``."""
    get = attrgetter(knob)
    return lambda f: _any_point(get(f.plan), lambda values: values == value)


# ----------------------------------------------------------------- what the rules derive
def _layout(f: PlanFacts) -> tuple[Any, Any, Any]:
    """An uneven pipeline layout: (uneven, the other stages, the layers they hold)."""
    plan = f.plan
    first_n = plan.pp_first_layers if f.batch else (plan.pp_first_layers or 0)
    last_n = plan.pp_last_layers if f.batch else (plan.pp_last_layers or 0)
    uneven = (first_n > 0) | (last_n > 0)
    return uneven, f.pp - (first_n > 0) - (last_n > 0), f.model.layers - first_n - last_n


def _uneven_split(f: PlanFacts) -> Any:
    uneven, rest_stages, rest = _layout(f)
    return uneven & (f.pp > 1) & ops.where(
        rest_stages > 0, (rest < rest_stages) | (rest % ops.maximum(rest_stages, 1) != 0), rest != 0)


def _uneven_split_values(f: PlanFacts) -> dict[str, Any]:
    _, rest_stages, rest = _layout(f)
    return {"stages": rest_stages, "rest": rest, "layers": f.model.layers}


def _kept(f: PlanFacts) -> Any:
    """Layers kept in bf16 by a low-precision recipe."""
    return f.plan.bf16_layers_start + f.plan.bf16_layers_end


def _fp8_recipe(recipe: Any) -> Any:
    return ((recipe == "delayed") | (recipe == "current")) | ((recipe == "blockwise") | (recipe == "mxfp8"))


def _modules_empty(f: PlanFacts) -> Any:
    modules = f.plan.recompute_modules
    return np.asarray(modules) == modules.code("") if isinstance(modules, ops.Labels) else len(modules) == 0


def _no_pool(f: PlanFacts) -> Any:
    # A batch's view reads an optional section as a bool per point when only some clusters have it.
    pool = f.cluster.memory_pool
    return pool is None or (type(pool) is np.ndarray and ~pool)


def has_dense_mlp(model: Model) -> bool:
    """Whether ``model`` has dense MLP sub-layers (the ``mlp`` of ``twin.core.workload``)."""
    if model.hybrid is not None:
        return model.hybrid.count("-") > 0
    return model.moe_layer_count < model.layers


def gpu_supports(gpu: Any, precision: Any) -> Any:
    """Whether ``gpu`` runs ``precision`` natively (see :meth:`GPU.supports`).

    For a batch ``gpu`` is a column view over the distinct GPUs (``distinct()`` gives
    them and each point's index) and the answer is one bool per point.
    """
    if isinstance(gpu, GPU) and not isinstance(precision, np.ndarray):  # one scenario (ops.is_batch, inline)
        return gpu.supports(precision)
    names, pcode = _categories(precision)
    if isinstance(gpu, GPU):
        return np.asarray([gpu.supports(str(p)) for p in names])[pcode]
    objects, index = gpu.distinct()
    # GPUs x precisions: a few of each, so a table indexed per point (no sort of the points)
    table = np.asarray([[o.supports(str(p)) for p in names] for o in objects], bool).reshape(len(objects), len(names))
    return table[index, np.broadcast_to(pcode, np.shape(index))]


def _categories(values: Any) -> tuple[Any, np.ndarray]:
    """(distinct names, each point's index among them) of a batch's string field."""
    if isinstance(values, ops.Labels):
        return values.categories, np.asarray(values, np.int64)
    if not ops.is_batch(values):
        return (values,), np.zeros(1, np.int64)
    names, inv = np.unique(values, return_inverse=True)
    return names, inv.reshape(-1)


# Schedules that run one model chunk per pipeline rank, and those that run two in a V
# (rank i holds chunks i and 2p-1-i: ZB paper §6, "ZB-V"; deepseek-ai/DualPipe README, DualPipeV).
ONE_CHUNK_SCHEDULES = ("1f1b", "zero_bubble_h1", "zero_bubble_h2", "dualpipe")
V_SCHEDULES = ("zero_bubble_v", "dualpipev")

_not = ops.logical_not

# ----------------------------------------------------------------------------- the table
# Each test combines per-point bools with & and | (a bool and a bool array alike) and
# negates with ops.logical_not; values and messages are those of one point.

# The degrees: tp*pp*cp*dp is the cluster, the batch splits over dp, tp over the heads, pp
# over the layers. dp: stated (every point of a batch that states it) or derived.
_DEGREES = RuleGroup((), None, (
    PlanRule("tp", lambda f: f.derived & (f.n % f.mp != 0), "tp*pp*cp ({mp}) must divide num_gpus ({n})",
             lambda f: {"mp": f.mp, "n": f.n}),
    PlanRule("dp", lambda f: f.given & (f.mp * f.dp != f.n), "tp*pp*cp*dp must equal num_gpus ({n}) (got {got})",
             lambda f: {"n": f.n, "got": f.mp * f.dp}),
    PlanRule("gbs", lambda f: f.plan.gbs % ops.maximum(f.mbs_dp, 1) != 0,
             "must be a multiple of mbs*dp ({mbs_dp}) (got {gbs})", lambda f: {"mbs_dp": f.mbs_dp, "gbs": f.plan.gbs}),
    PlanRule("tp", lambda f: f.model.heads % f.tp != 0, "must divide the attention heads ({heads}) (got {tp})",
             lambda f: {"heads": f.model.heads, "tp": f.tp}),
    PlanRule("tp", lambda f: (f.model.kv_head_count % f.tp != 0) & (f.tp % f.model.kv_head_count != 0),
             "must divide or be a multiple of kv_heads ({kv}) (got {tp})",
             lambda f: {"kv": f.model.kv_head_count, "tp": f.tp}),
    PlanRule("pp", lambda f: f.pp > f.model.layers, "must be <= layers ({layers}) (got {pp})",
             lambda f: {"layers": f.model.layers, "pp": f.pp}),
))
# An uneven pipeline layout (Megatron --decoder-first/last-pipeline-num-layers).
_LAYOUT = RuleGroup(("pp_first_layers", "pp_last_layers"), _layout_set, (
    PlanRule("pp_first_layers", lambda f: _layout(f)[0] & (f.pp == 1),
             "an uneven pipeline layout needs pipeline parallelism (pp > 1)"),
    PlanRule("pp_first_layers", _uneven_split, "the other {stages} stage(s) must split the remaining {rest} of "
             "{layers} layers evenly (Megatron-Core's uneven layout)", _uneven_split_values),
))


def _virtual_stages_short(f: PlanFacts) -> Any:
    """Interleaving with a virtual stage that holds nothing. Evenly split: pp*vp > layers. With
    an uneven layout, the first (last) stage may give one of its vp chunks to the embedding (the
    loss): Megatron-Core's --account-for-embedding-in-pipeline-split and
    --account-for-loss-in-pipeline-split count each as a layer of the split (Qwen3-235B-A22B's
    94 layers in pp 32 x vp 3: the first and last stages 2 layers, the others 3; Megatron-Core
    MoE Model Zoo, best_practice/Qwen3).
    """
    plan = f.plan
    uneven, rest_stages, rest = _layout(f)
    first_n = plan.pp_first_layers if f.batch else (plan.pp_first_layers or 0)
    last_n = plan.pp_last_layers if f.batch else (plan.pp_last_layers or 0)
    short_end = ((first_n > 0) & (first_n < f.vp - 1)) | ((last_n > 0) & (last_n < f.vp - 1))
    short_rest = (rest_stages > 0) & (rest < f.vp * ops.maximum(rest_stages, 1))
    return (f.vp > 1) & ops.where(uneven, short_end | short_rest, f.pp * f.vp > f.model.layers)


_INTERLEAVING = RuleGroup(("vp",), None, (
    PlanRule("vp", lambda f: (f.vp > 1) & (f.pp == 1), "interleaving (vp > 1) needs pipeline parallelism (pp > 1)"),
    PlanRule("vp", _virtual_stages_short,
             "pp*vp ({ppvp}) must be <= the layers ({layers}): every virtual stage needs a layer (with an uneven "
             "layout, the first and last stages' chunks may hold the embedding and the loss instead: each of those "
             "stages at least vp-1 layers, every other stage at least vp)",
             lambda f: {"ppvp": f.pp * f.vp, "layers": f.model.layers}),
))
# A stated pipeline schedule; m: micro-batches per step.
# - every schedule but "auto" is a pipeline schedule: pp > 1;
# - 1F1B, ZB-H1, ZB-H2 and DualPipe run one chunk per rank (vp 1), interleaved more
#   (vp > 1), ZB-V and DualPipeV two in a V (vp 2);
# - interleaved: the micro-batches a multiple of pp (Megatron-Core
#   ``forward_backward_pipelining_with_interleaving``: with the default
#   microbatch_group_size_per_vp_stage = pp, a last group of fewer than pp micro-batches
#   is refused);
# - ZB-V: each stage splits into two equal chunks (sail-sg/zero-bubble-pipeline-parallelism
#   README: "ZBV schedule requires the number of layers per pipeline to be an even number");
# - DualPipe: an even pp and an even number of micro-batches, at least 2*pp; DualPipeV: at
#   least 2*pp (deepseek-ai/DualPipe, ``DualPipe.step`` / ``DualPipeV.step`` assertions).
_SCHEDULE = RuleGroup(("schedule",), lambda f: _stated(f.plan.schedule, "auto"), (
    PlanRule("schedule", lambda f: (f.plan.schedule != "auto") & (f.pp == 1),
             "{schedule} is a pipeline schedule: it needs pp > 1", lambda f: {"schedule": f.plan.schedule}),
    PlanRule("vp", lambda f: ops.isin(f.plan.schedule, ONE_CHUNK_SCHEDULES) & (f.vp != 1),
             "{schedule} runs one model chunk per pipeline rank: vp must be 1 (got {vp})",
             lambda f: {"schedule": f.plan.schedule, "vp": f.vp}),
    PlanRule("vp", lambda f: (f.plan.schedule == "interleaved") & (f.vp == 1), "interleaved needs vp > 1 (got 1)"),
    PlanRule("gbs", lambda f: (f.plan.schedule == "interleaved") & (f.m % f.pp != 0),
             "interleaved needs the micro-batches per step ({m}) to be a multiple of pp ({pp}) (Megatron-Core's "
             "interleaved schedule)", lambda f: {"m": f.m, "pp": f.pp}),
    PlanRule("vp", lambda f: ops.isin(f.plan.schedule, V_SCHEDULES) & (f.vp != 2),
             "{schedule} puts two model chunks on each pipeline rank: vp must be 2 (got {vp})",
             lambda f: {"schedule": f.plan.schedule, "vp": f.vp}),
    PlanRule("pp", lambda f: (f.plan.schedule == "zero_bubble_v") & (f.model.layers % (2 * f.pp) != 0),
             "zero_bubble_v splits every stage into two equal chunks: 2*pp ({pp2}) must divide the layers ({layers})",
             lambda f: {"pp2": 2 * f.pp, "layers": f.model.layers}),
    PlanRule("pp", lambda f: (f.plan.schedule == "dualpipe") & (f.pp % 2 != 0), "dualpipe needs an even pp (got {pp})",
             lambda f: {"pp": f.pp}),
    PlanRule("gbs", lambda f: (f.plan.schedule == "dualpipe") & ((f.m % 2 != 0) | (f.m < 2 * f.pp)),
             "dualpipe needs an even number of micro-batches per step, at least 2*pp ({pp2}) (got {m})",
             lambda f: {"pp2": 2 * f.pp, "m": f.m}),
    PlanRule("gbs", lambda f: (f.plan.schedule == "dualpipev") & (f.m < 2 * f.pp),
             "dualpipev needs at least 2*pp ({pp2}) micro-batches per step (got {m})",
             lambda f: {"pp2": 2 * f.pp, "m": f.m}),
))
_CONTEXT = RuleGroup(("cp",), None, (
    PlanRule("cp", lambda f: (f.cp > 1) & (f.model.seq_len % (2 * f.cp) != 0),
             "2*cp ({cp2}) must divide seq_len ({seq})", lambda f: {"cp2": 2 * f.cp, "seq": f.model.seq_len}),
))
_CP_COMM = RuleGroup(("cp_comm_type",), lambda f: _stated(f.plan.cp_comm_type, "p2p"), (
    PlanRule("cp_comm_type", lambda f: (f.plan.cp_comm_type != "p2p") & (f.cp == 1),
             "applies only with context parallelism (cp > 1)"),
    PlanRule("cp_comm_type", lambda f: (f.plan.cp_comm_type == "a2a") & ((f.model.heads // f.tp) % f.cp != 0),
             "a2a splits the heads of a tensor-parallel rank ({heads}) over cp ({cp}): cp must divide them",
             lambda f: {"heads": f.model.heads // f.tp, "cp": f.cp}),
))
_SEQUENCE = RuleGroup(("tp",), None, (  # sequence parallelism needs tp > 1
    PlanRule("sequence_parallel", lambda f: f.plan.sp & (f.model.seq_len % (f.tp * f.cp) != 0),
             "tp*cp ({tpcp}) must divide seq_len ({seq})", lambda f: {"tpcp": f.tp * f.cp, "seq": f.model.seq_len}),
))
_DENSE_EXPERTS = RuleGroup(("ep",), lambda f: f.model.moe is None, (
    PlanRule("ep", lambda f: f.ep > 1, "expert parallelism needs an MoE model (model.moe)"),
))
_MOE_EXPERTS = RuleGroup(("ep",), lambda f: f.model.moe is not None, (
    PlanRule("ep", lambda f: (f.ep > 1) & (f.model.moe.experts % f.ep != 0),
             "must divide the experts ({experts}) (got {ep})", lambda f: {"experts": f.model.moe.experts, "ep": f.ep}),
))
_RANK_ORDER = RuleGroup(("rank_order",), _any_is("rank_order", "tp-cp-pp-dp"), (
    PlanRule("rank_order", lambda f: (f.plan.rank_order == "tp-cp-pp-dp") & (f.ep > 1),
             "tp-cp-pp-dp places no expert-parallel groups: it needs ep = 1"),
))
# Hybrid sharding over dp_shard of the dp*cp ranks.
_DP_SHARD = RuleGroup(("dp_shard",), lambda f: _stated(f.plan.dp_shard, 0), (
    PlanRule("dp_shard", lambda f: (f.plan.dp_shard > 0) & ((f.dp * f.cp) % ops.maximum(f.plan.dp_shard, 1) != 0),
             "must divide dp*cp ({dpcp}) (got {k})", lambda f: {"dpcp": f.dp * f.cp, "k": f.plan.dp_shard}),
    PlanRule("dp_shard", lambda f: (f.plan.dp_shard > 0) & (f.plan.optimizer_sharding == "none"),
             "hybrid sharding needs a sharded optimizer_sharding (got 'none')"),
))
_EXPERT_GROUP = RuleGroup(("ep", "etp"), None, (  # ep 1 and etp tp: a group of tp GPUs
    PlanRule("ep", lambda f: (f.tp * f.cp * f.dp) % f.expert_group != 0,
             "ep*etp ({group}) must divide tp*cp*dp ({tpcpdp})",
             lambda f: {"group": f.expert_group, "tpcpdp": f.tp * f.cp * f.dp}),
))
_PRECISION = RuleGroup((), None, (
    PlanRule("precision", lambda f: _not(gpu_supports(f.cluster.gpu, f.plan.precision)),
             "{gpu} ({generation}) has no {precision} tensor cores",
             lambda f: {"gpu": f.cluster.gpu.name, "generation": f.cluster.gpu.generation,
                        "precision": f.plan.precision}),
))
# The low-precision recipe (Transformer Engine recipes) and the layers it keeps in bf16.
_RECIPE = RuleGroup(("recipe", "bf16_layers_start", "bf16_layers_end"), _recipe_set, (
    PlanRule("recipe", lambda f: _fp8_recipe(f.plan.recipe) & (f.plan.precision != "fp8"),
             "{recipe} is a recipe for fp8, not {precision}",
             lambda f: {"recipe": f.plan.recipe, "precision": f.plan.precision}),
    PlanRule("recipe", lambda f: (f.plan.recipe == "nvfp4") & (f.plan.precision != "fp4"),
             "nvfp4 is a recipe for fp4, not {precision}", lambda f: {"precision": f.plan.precision}),
    PlanRule("recipe", lambda f: ((f.plan.recipe == "mxfp8") | (f.plan.recipe == "nvfp4"))
             & _not(gpu_supports(f.cluster.gpu, "fp4")),
             "{recipe} needs microscaling tensor cores (Blackwell); {gpu} has none",
             lambda f: {"recipe": f.plan.recipe, "gpu": f.cluster.gpu.name}),
    PlanRule("bf16_layers_start",
             lambda f: (_kept(f) > 0) & _not((f.plan.precision == "fp8") | (f.plan.precision == "fp4")),
             "applies only with precision fp8 or fp4"),
    PlanRule("bf16_layers_start", lambda f: _kept(f) > f.model.layers,
             "bf16_layers_start + bf16_layers_end ({kept}) must be <= layers ({layers})",
             lambda f: {"kept": _kept(f), "layers": f.model.layers}),
))
_RECOMPUTE_LAYERS = RuleGroup(("recompute_layers",), None, (
    PlanRule("recompute_layers",
             lambda f: (f.plan.recompute_layers > 0 if f.batch else f.plan.recompute_layers is not None)
             & (f.plan.recompute != "full"), "applies only with recompute: full"),
))
# Knobs of one mode only: set away from their default elsewhere, they would be ignored.
_LORA = RuleGroup(("lora_rank",), lambda f: _stated(f.plan.lora_rank, DEFAULT_LORA_RANK), (
    PlanRule("lora_rank", lambda f: (f.plan.lora_rank != DEFAULT_LORA_RANK) & (f.plan.trainable != "lora"),
             "applies only with trainable: lora"),
))
_RESHARD = RuleGroup(("fsdp_reshard_after_forward",), lambda f: _stated(f.plan.fsdp_reshard_after_forward, True), (
    PlanRule("fsdp_reshard_after_forward",
             lambda f: _not(f.plan.fsdp_reshard_after_forward) & (f.plan.optimizer_sharding != "fsdp"),
             "applies only with optimizer_sharding: fsdp"),
))
# recompute_modules applies with selective recomputation only, names at least one module,
# mla_up_proj needs MLA, moe_act and moe an MoE model and mlp dense MLP layers (Megatron-Core
# TransformerConfig's checks; its mlp recomputes the dense MLP only, not an MoE layer).
_MODULES = RuleGroup(("recompute_modules",), _modules_set, (
    PlanRule("recompute_modules",
             lambda f: _not(default_recompute_modules(f.plan.recompute_modules)) & (f.plan.recompute != "selective"),
             "applies only with recompute: selective"),
    PlanRule("recompute_modules", _modules_empty, "must name at least one module"),
    PlanRule("recompute_modules", lambda f: (f.model.attention != "mla" or f.model.mla is None)
             & names_module(f.plan.recompute_modules, "mla_up_proj"),
             "mla_up_proj needs multi-head latent attention (model.attention: mla)"),
    PlanRule("recompute_modules", lambda f: (f.model.moe is None) & names_module(f.plan.recompute_modules, "moe_act"),
             "moe_act needs an MoE model (model.moe)"),
    PlanRule("recompute_modules", lambda f: (f.model.moe is None) & names_module(f.plan.recompute_modules, "moe"),
             "moe needs an MoE model (model.moe)"),
    PlanRule("recompute_modules",
             lambda f: (not has_dense_mlp(f.model)) & names_module(f.plan.recompute_modules, "mlp"),
             "mlp needs dense MLP layers (an MoE model with moe.dense_layers, or a dense one)"),
))
_OFFLOAD = tuple(RuleGroup((f"offload.{what}",), _any_is(f"offload.{what}", "cxl"), (
    PlanRule(f"offload.{what}", lambda f, what=what: (getattr(f.plan.offload, what) == "cxl") & _no_pool(f),
             "offloading to 'cxl' needs cluster.memory_pool"),
)) for what in ("optimizer", "params", "activations"))

# Every rule of a plan, in the order they are checked (a point's reason is its first broken rule).
PLAN_RULES: tuple[RuleGroup, ...] = (
    _DEGREES, _LAYOUT, _INTERLEAVING, _SCHEDULE, _CONTEXT, _CP_COMM, _SEQUENCE, _DENSE_EXPERTS, _MOE_EXPERTS,
    _RANK_ORDER, _DP_SHARD, _EXPERT_GROUP, _PRECISION, _RECIPE, _RECOMPUTE_LAYERS, _LORA, _RESHARD, _MODULES,
    *_OFFLOAD,
)


def _walk(group: RuleGroup) -> tuple[Any, Any, Test | None, tuple[PlanRule, ...]]:
    """What :func:`plan_rules` reads of a group: (a getter of its knobs or None, their defaults, when, rules)."""
    if not group.knobs:
        return None, None, group.when, group.rules
    knobs = attrgetter(*group.knobs)
    return knobs, knobs(Plan(gbs=1)), group.when, group.rules


_GROUPS = tuple(map(_walk, PLAN_RULES))
