"""The anatomy of one scenario's training step: what each pipeline rank computes per micro-batch
and which collectives each parallel dimension issues, where, and how often.

The :class:`~twin.core.estimate.Estimate` says how long a step takes and where the time goes,
summed over the step. Replaying the step elsewhere (an MLCommons Chakra execution trace for
ASTRA-sim, ``twin.traces``) needs the step taken apart again: per pipeline rank its layers and
its forward, backward and recomputation per micro-batch; per strategy the collectives it issues
(operation, group, bytes, the twin's time for one) and where in the step each runs. That is
this module's :class:`StepAnatomy`, built by ``twin.core.run.anatomy`` from the very terms the
estimate was assembled from and handed out by ``Engine.step_anatomy``. Plain data only.

Placements (:attr:`Issue.at`), with :attr:`Issue.per` the count per unit:

============== =============================================================================
at             unit
============== =============================================================================
layer_fwd      per layer of the rank, in each micro-batch's forward pass
layer_bwd      per layer, in each backward pass
layer_recompute per layer, in each recomputed forward (``plan.recompute: full``)
microbatch_fwd per micro-batch, at the start of its forward on the rank
microbatch_bwd per micro-batch, at the end of its backward on the rank
chunk_fwd      per model chunk and micro-batch, before the chunk's forward (size: all chunks)
chunk_bwd      per model chunk and micro-batch, before the chunk's backward (size: all chunks)
chunk_grad     per model chunk and micro-batch, after the chunk's backward (size: all chunks)
send_fwd       per model chunk and micro-batch, the activations to the next stage (pipeline)
send_bwd       per model chunk and micro-batch, the gradients to the previous stage (pipeline)
step_start     per step, before the chunk's first forward (size: all chunks)
step_end       per step, after the chunk's last backward (size: all chunks)
============== =============================================================================

"size: all chunks" means :attr:`Issue.size_bytes` and :attr:`Issue.time_s` are the rank's whole
(all its layers); a trace splits them over the rank's model chunks by their layers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PLACEMENTS = ("layer_fwd", "layer_bwd", "layer_recompute", "microbatch_fwd", "microbatch_bwd", "chunk_fwd",
              "chunk_bwd", "chunk_grad", "send_fwd", "send_bwd", "step_start", "step_end")
# Placements whose size is the rank's whole, split over its chunks (module docstring).
SPLIT_OVER_CHUNKS = ("chunk_fwd", "chunk_bwd", "chunk_grad", "step_start", "step_end")


@dataclass(frozen=True, slots=True)
class Issue:
    """One kind of collective a strategy issues on one pipeline rank.

    ``dimension``: the group it runs over (a key of :attr:`StepAnatomy.groups`: tp, cp, ep,
    dp, dpr, edp, pp); ``op``: all_reduce, all_gather, reduce_scatter, all_to_all or send_recv;
    ``size_bytes``: per rank in the twin's convention (an all-gather's gathered output, a
    reduce-scatter's input, an all-to-all's send buffer, a send's payload); ``time_s``: the
    twin's time for one, link sharing included; ``at`` / ``per``: where it runs and how often
    (module table); ``sent_bytes``: what one rank sends for one (``bus_factor`` x size);
    ``reported``: the estimate's dimension it is counted under (its strategy's: the
    data-parallel strategy's expert-gradient reduction runs over edp, reported under dp).
    """

    strategy: str
    reported: str
    dimension: str
    op: str
    size_bytes: float
    time_s: float
    algorithm: str
    at: str
    per: float
    sent_bytes: float


@dataclass(frozen=True, slots=True)
class StrategyPart:
    """One strategy's share of one pipeline rank's step.

    ``issues``: its collectives; the ``*_s`` and ``bytes_*`` fields are its terms as the step
    model has them (``Terms``: per micro-batch and per step, link sharing included), which the
    issues add up to. ``generic``: no recipe describes this strategy's collectives (a plugin's
    own), so they are one collective per micro-batch and one per step, of its bytes.
    """

    strategy: str
    dimension: str
    phase: str
    overlapped: bool
    issues: tuple[Issue, ...]
    issued_per_microbatch_s: float
    issued_per_step_s: float
    bytes_per_microbatch: float
    bytes_per_step: float
    exposed_per_microbatch_s: float
    exposed_per_step_s: float
    generic: bool = False


@dataclass(frozen=True, slots=True)
class StageClass:
    """One pipeline rank (every tp/cp/dp rank of a stage runs the same step).

    Per micro-batch, all the rank's model chunks together: ``fwd_s``, ``bwd_s``,
    ``recompute_s`` (as ``StageTimes``: each pass the larger of its device and host time),
    ``attention_s`` the attention cores' forward and backward in them;
    ``layer_fwd_s`` / ``layer_bwd_s`` one mean layer's passes (the rest of a pass is the stage's
    ends: embedding, head, per-micro-batch host work); ``bottleneck``: the stage the estimate's
    compute is of.
    """

    rank: int
    layers: int
    fwd_s: float
    bwd_s: float
    recompute_s: float
    layer_fwd_s: float
    layer_bwd_s: float
    attention_s: float
    embedding: bool
    head: bool
    bottleneck: bool
    parts: tuple[StrategyPart, ...] = ()


@dataclass(frozen=True, slots=True)
class StepAnatomy:
    """One scenario's step taken apart (module docstring).

    ``groups``: per dimension (group size, rank stride) under the plan's rank order;
    ``stages``: one :class:`StageClass` per pipeline rank; ``optimizer_s``: the optimizer step;
    ``estimate``: the totals of the estimate this anatomy is of (``step_time_s``,
    ``compute_s``, ``recompute_s``, ``optimizer_s``, ``comm_issued_s`` and ``bytes_per_step``
    per dimension) for checking a replay against; ``notes``: what a reader should know.
    """

    scenario: str
    num_gpus: int
    tp: int
    cp: int
    ep: int
    dp: int
    pp: int
    vp: int
    microbatches: int
    schedule: str
    rank_order: str
    groups: dict[str, tuple[int, int]]
    stages: tuple[StageClass, ...]
    optimizer_s: float
    estimate: dict[str, Any]
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def bottleneck(self) -> StageClass:
        """The pipeline rank the estimate's compute is of."""
        return next(s for s in self.stages if s.bottleneck)
