"""The collectives reader (twin.reference.validate_collectives): spellings, bad cases,
placement of the measured ranks, per-NIC points and the scale-out fields a case states."""

from __future__ import annotations

from typing import Any

import pytest

from twin.core.collectives import bus_factor
from twin.reference import collective_op, validate_collectives

SCALE_OUT = {"fabric": "infiniband", "gbps_per_gpu": 400, "nics_per_node": 8}


def case(cid: str, op: str = "all_reduce", *, points: list[Any] | None = None, scale_out: dict[str, Any] | None = None,
         algorithm: str | None = None, **cluster: Any) -> dict[str, Any]:
    """A DGX H100-like case; ``cluster`` fields override (num_gpus defaults to 16: 2 nodes)."""
    c = {"gpu": "H100-SXM-80GB", "num_gpus": 16, "gpus_per_node": 8,
         "scale_up": {"fabric": "nvlink4", "domain_gpus": 8}, "scale_out": {**SCALE_OUT, **(scale_out or {})}}
    c.update(cluster)
    return {"id": cid, "op": op, "algorithm": algorithm, "cluster": c,
            "points": points if points is not None else [{"bytes": 2**30, "busbw_GBps": 100.0}]}


def scored(engine, *cases: dict[str, Any]) -> dict[str, Any]:
    report = validate_collectives(engine, {"cases": list(cases)})
    assert report.skipped == [], report.skipped
    return {c.id: c for c in report.cases}


def test_nccl_tests_spellings_are_the_twins_ops(engine):
    assert collective_op("alltoall") == "all_to_all"
    assert collective_op("sendrecv") == "send_recv"
    assert collective_op("All-Gather") == "all_gather"
    assert collective_op("ep_dispatch") == "ep_dispatch"
    got = scored(engine, case("a2a", "alltoall"), case("p2p", "sendrecv"), case("ag", "allgather"))
    assert {c.family for c in got.values()} == {"all_to_all", "send_recv", "all_gather"}
    # the spelling does not change the prediction
    same = scored(engine, case("x", "all_to_all"), case("y", "alltoall"))
    assert same["x"].predicted == same["y"].predicted


@pytest.mark.parametrize(("bad", "field"), [
    (case("op", "all_scatter"), "op"),
    ({**case("cl"), "cluster": "dgx-h100"}, "cluster"),
    (case("gpn", gpus_per_node="eight"), "cluster.gpus_per_node"),
    (case("gpu", gpu="TPU-v9"), "TPU-v9"),
    (case("rate", scale_out={"gbps_per_gpu": "fast"}), "cluster.scale_out.gbps_per_gpu"),
    (case("topo", scale_out={"topology": "torus"}), "cluster.scale_out.topology"),
    (case("taper", scale_out={"oversubscription": "1:0"}), "cluster.scale_out.oversubscription"),
    (case("routing", scale_out={"routing": "magic"}), "cluster.scale_out.routing"),
    (case("rpn", ranks_per_node=16), "cluster.ranks_per_node"),
    (case("nodes", nodes=3), "cluster.nodes"),
    (case("bw", points=[{"bytes": 2**30, "busbw_GBps": "fast"}]), "points[0].busbw_GBps"),
    (case("size", points=[{"bytes": [1], "busbw_GBps": 1.0}]), "points[0].bytes"),
    (case("range", points=[{"busbw_GBps_range": [1.0]}]), "points[0].busbw_GBps_range"),
    (case("per", points=[{"bytes": 2**30, "busbw_GBps": 40.0, "per": "node"}]), "points[0].per"),
    (case("pts", points={"bytes": 1}), "points"),  # type: ignore[arg-type]
    (case("algo", algorithm="butterfly"), "algorithm"),
    (case("nic1", points=[{"bytes": 2**30, "busbw_GBps": 40.0, "per": "nic"}], num_gpus=8), "per"),
    (case("cpu", host_cpu="arm"), "cluster.host_cpu"),
])
def test_a_bad_case_is_that_cases_skip_not_the_files(engine, bad, field):
    report = validate_collectives(engine, {"cases": [case("good"), bad, "not a case"]})
    assert [c.id for c in report.cases] == ["good"]
    reasons = {s["id"]: s["reason"] for s in report.skipped}
    assert field in reasons[bad["id"]], reasons
    assert "mapping" in reasons["cases[2]"]


def test_ranks_per_node_places_one_gpu_and_its_nic_per_node(engine):
    """``-N 1`` runs (one GPU per node) cross the network; ranks packed on one node do not."""
    got = scored(engine, case("per-node", num_gpus=2, ranks_per_node=1),
                 case("via-nodes", num_gpus=2, nodes=2), case("packed", num_gpus=2))
    assert got["per-node"].nodes == got["via-nodes"].nodes == 2 and got["packed"].nodes == 1
    assert got["per-node"].predicted == got["via-nodes"].predicted
    nic = 400 / 8  # GB/s of one 400 Gb/s NIC
    assert got["per-node"].predicted <= nic < got["packed"].predicted


def test_per_nic_is_the_traffic_through_one_nic(engine):
    """Per NIC = bytes one NIC sends / time, not the per-GPU figure divided by the node's NICs."""
    per_nic = [{"bytes": 2**30, "busbw_GBps": 40.0, "per": "nic"}]
    one_hca = {"nics_per_node": 1, "gbps_per_gpu": 50}  # NCCL_IB_HCA=mlx5_0: one NIC for the node
    got = scored(engine,
                 case("ring", algorithm="ring"), case("ring-nic", algorithm="ring", points=per_nic),
                 case("a2a", "alltoall"), case("a2a-nic", "alltoall", points=per_nic),
                 case("one", num_gpus=2, ranks_per_node=1),
                 case("one-nic", num_gpus=2, ranks_per_node=1, points=per_nic),
                 case("hca", scale_out=one_hca, algorithm="ring"),
                 case("hca-nic", scale_out=one_hca, algorithm="ring", points=per_nic))
    # A ring leaves the node once per ring: the node's NICs share busbw evenly.
    assert got["ring-nic"].predicted == pytest.approx(got["ring"].predicted / 8)
    # All-to-all: each of the 8 ranks sends 8/16 of its buffer off-node, over 8 NICs.
    n, k = 16, 8
    share = k * (n - k) / n / bus_factor("all_to_all", n) / 8
    assert got["a2a-nic"].predicted == pytest.approx(got["a2a"].predicted * share)
    assert got["a2a-nic"].predicted != pytest.approx(got["a2a"].predicted / 8)
    # One GPU and its NIC per node, or NCCL held to one NIC: the per-NIC figure is the NIC's own.
    assert got["one-nic"].predicted == pytest.approx(got["one"].predicted)
    assert got["hca-nic"].predicted == pytest.approx(got["hca"].predicted)


def test_scale_out_fields_reach_the_scenario(engine):
    taper = {"topology": "fat-tree", "oversubscription": "4:1"}  # publishers' spellings
    got = scored(engine,
                 case("flat", "alltoall", num_gpus=256), case("tapered", "alltoall", num_gpus=256, scale_out=taper),
                 case("ib", num_gpus=256), case("sharp", num_gpus=256, scale_out={"sharp": True}),
                 case("ecmp", num_gpus=256, scale_out={"routing": "ECMP"}))
    assert got["tapered"].predicted < got["flat"].predicted
    assert got["sharp"].predicted > got["ib"].predicted
    assert got["ecmp"].predicted <= got["ib"].predicted


def test_the_hosts_cpu_a_case_states_reaches_nccls_model(engine):
    """cluster.host_cpu: amd takes NCCL's AMD network post overhead (2 us per intra-node step of
    an inter-node ring): a 1 KiB all-gather on 2 x 8 GPUs, ring LL, 14 steps x 1 us slower."""
    lat = [{"bytes": 1024, "time_us": 30.0}]
    got = scored(engine, case("intel", "all_gather", points=lat, host_cpu="intel"),
                 case("amd", "all_gather", points=lat, host_cpu="amd"), case("unstated", "all_gather", points=lat))
    assert got["intel"].predicted == got["unstated"].predicted
    # time from the scored busbw: bytes x (n-1)/n / (GB/s x 1e9) s; the LL cap falls from 39.0 to 22.5 GB/s too
    t_intel, t_amd = (1024 * 15 / 16 / (got[k].predicted * 1e9) for k in ("intel", "amd"))
    assert t_amd - t_intel == pytest.approx(14 * 1.0e-6 + 1024 * 15 / 16 * (1 / 22.5e9 - 1 / 39.0e9), rel=1e-6)


def test_a_published_time_is_scored_as_bandwidth_and_latency_counts(engine):
    """A point with bytes and time but no busbw is busbw = bytes/time x bus factor; the
    prediction is the achieved busbw (latency included), so a small message scores low."""
    got = scored(engine, case("t", "all_gather", points=[{"bytes": 2**30, "time_us": 10_000.0}]),
                 case("small", points=[{"bytes": 1024, "time_us": 30.0}]),
                 case("large", points=[{"bytes": 2**33, "busbw_GBps": 300.0}]))
    assert got["t"].measured == pytest.approx(2**30 / 10e-3 / 1e9 * 15 / 16)
    assert got["small"].predicted < 1.0 < got["large"].predicted


def test_sub_gbps_published_busbw_is_rounding_noise_unless_a_time_is_given(engine):
    report = validate_collectives(engine, {"cases": [
        case("noise", points=[{"bytes": 1024, "busbw_GBps": 0.01}]),
        case("timed", points=[{"bytes": 1024, "busbw_GBps": 0.01, "time_us": 30.0}])]})
    assert [c.id for c in report.cases] == ["timed"]
    assert [s["id"] for s in report.skipped] == ["noise"]


def test_summary_reports_multi_node_cases(engine):
    report = validate_collectives(engine, {"cases": [case("one-node", num_gpus=8), case("two-nodes")]})
    summary = report.summary()
    assert summary["multi_node"]["n"] == 1
    assert {c["id"]: c["nodes"] for c in report.to_dict()["cases"]} == {"one-node": 1, "two-nodes": 2}


def test_published_annotations_are_kept_but_not_read(engine):
    """A point's ``nccl_algorithm`` (the algorithm the source's own NCCL log names) and a
    case's ``consistency`` note are bookkeeping (CASES.md): they change neither figure."""
    plain = case("plain", points=[{"bytes": 2**30, "busbw_GBps": 100.0}])
    noted = {**case("noted", points=[{"bytes": 2**30, "busbw_GBps": 100.0, "nccl_algorithm": "Tree LL128"}]),
             "consistency": "the summary and the raw output disagree on the NIC count"}
    got = scored(engine, plain, noted)
    assert got["noted"].predicted == got["plain"].predicted
    assert got["noted"].measured == got["plain"].measured == 100.0
