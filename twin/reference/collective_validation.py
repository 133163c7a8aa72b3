"""Score the cases of a ``twin-reference-collectives/v1`` document: each measured point's
bus bandwidth (per NIC where a case says so) against the twin's, and per case the point
with the median error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from twin.core.collectives import bus_factor, collective_cost
from twin.core.errors import SpecError, TwinError
from twin.engine import Engine
from twin.reference.case_fields import _MALFORMED, _case_id, _listed_skips
from twin.reference.case_report import CaseResult, Report, _quantile
from twin.reference.collective_case_reader import collective_setup
from twin.reference.ep_workloads import ep_predicted_GBps, ep_workload

# Message size assumed when a peak bus bandwidth is published without its size: peak
# figures come from the large-message end of nccl-tests sweeps (e.g. NVIDIA/nccl#1455
# "-b 2G -e 4G").
PEAK_MESSAGE_BYTES = 2 * 2**30


def _node_egress(op: str, algorithm: str, size: float, n: int, nodes: int, k_node: int) -> float:
    """Bytes one node of the group sends to other nodes in one collective of ``size`` bytes
    (nccl-tests sizes), by op and the algorithm the twin chose (CASES.md, "Per-NIC points").
    """
    if op == "all_reduce":
        if algorithm == "ring":
            return 2.0 * (n - 1) / n * size         # every ring leaves the node once
        if algorithm == "sharp":
            return size                              # each node sends its reduced share up once
        return 2.0 * (nodes - 1) / nodes * size      # tree / NVLS-tree: a reduction tree over nodes
    if op in ("all_gather", "reduce_scatter"):
        return (n - 1) / n * size
    if op == "all_to_all":
        return k_node * (n - k_node) / n * size      # every rank's share for the off-node ranks
    return size                                      # broadcast ring, send_recv (one pair crosses)


def _score_collective(engine: Engine, case: Any) -> CaseResult | str:
    """One case scored, or the reason it is skipped; SpecError for a malformed case."""
    setup = collective_setup(engine, case)
    cid, op, algorithm, cluster = setup.id, setup.op, setup.algorithm, setup.cluster
    hierarchy, span, n, parsed = setup.hierarchy, setup.span, setup.n, setup.points
    notes = list(setup.notes)
    so = cluster.scale_out
    nics_node = (so.nics_per_node if so is not None and so.nics_per_node else cluster.gpus_per_node)
    points: list[dict[str, Any]] = []
    for pt in parsed:
        if op in ("ep_dispatch", "ep_combine"):
            wl = ep_workload(case, op)
            size = wl.dispatched_bytes
            predicted, cost = ep_predicted_GBps(wl, span, hierarchy)
        else:
            size = pt.size or PEAK_MESSAGE_BYTES
            cost = collective_cost(op, size, span, hierarchy, algorithm)
            t = float(cost.time_s)
            if pt.per_nic:
                if span.nodes <= 1:
                    raise SpecError("points.per", "per: nic needs a group that spans nodes")
                k_node = -(-n // span.nodes)
                nics = 1 if op == "send_recv" else max(1, round(k_node * nics_node / cluster.gpus_per_node))
                egress = _node_egress(op, str(cost.algorithm), size, n, int(span.nodes), k_node)
                predicted = egress / nics / t / 1e9
            else:
                predicted = size * bus_factor(op, n) / t / 1e9  # achieved busbw, latency included
        points.append({"bytes": size, "predicted_busbw_GBps": predicted, "measured_busbw_GBps": pt.busbw,
                       "algorithm": str(cost.algorithm)})
    if not points:
        return "no bus bandwidth published (only algbw with unknown rank count, or no figure)"
    errs = sorted(abs(p["predicted_busbw_GBps"] - p["measured_busbw_GBps"]) / p["measured_busbw_GBps"]
                  for p in points)
    mid = _quantile(errs, 0.5)
    # The case's headline figure: the point whose error is the median one.
    rep = min(points, key=lambda p: abs(abs(p["predicted_busbw_GBps"] - p["measured_busbw_GBps"])
                                        / p["measured_busbw_GBps"] - mid))
    if len(points) > 1:
        notes.append(f"{len(points)} message sizes; the point with the median error is shown")
    return CaseResult(id=cid, family=str(case.get("family") or op), predicted=rep["predicted_busbw_GBps"],
                      measured=rep["measured_busbw_GBps"], metric="busbw_GBps", notes=notes,
                      points=points if len(points) > 1 else [], nodes=int(span.nodes))


def validate_collectives(engine: Engine, data: Mapping[str, Any]) -> Report:
    """Score every case of a ``twin-reference-collectives/v1`` document.

    A case that cannot be read (unknown op, malformed cluster, a non-numeric point) or
    modelled is listed as skipped with the reason; the other cases are still scored.
    """
    results: list[CaseResult] = []
    skipped: list[dict[str, str]] = []
    for i, case in enumerate(data.get("cases") or []):
        cid = _case_id(case, f"cases[{i}]") if isinstance(case, Mapping) else f"cases[{i}]"
        try:
            result = _score_collective(engine, case)
        except TwinError as err:
            skipped.append({"id": cid, "reason": f"cannot model: {err}"})
            continue
        except _MALFORMED as err:
            skipped.append({"id": cid, "reason": f"malformed case: {type(err).__name__}: {err}"})
            continue
        if isinstance(result, str):
            skipped.append({"id": cid, "reason": result})
        else:
            results.append(result)
    skipped += _listed_skips(data)
    return Report(kind="collectives", cases=results, skipped=skipped)
