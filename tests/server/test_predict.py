"""Predict, Validate and GetCatalog against the live server."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from google.protobuf import struct_pb2

from tests.conftest import EXAMPLES, ROOT
from twin.client import TwinClient
from twin.engine import Engine
from twin.rpc.v1 import scenario_pb2 as s
from twin.rpc.v1 import twin_service_pb2 as t
from twin.wire.convert import estimate_from_message, scenario_from_mapping

ONE_LINE = {"cluster": {"system": "DGX-H100", "num_gpus": 1024}, "model": "llama3.1-70b",
            "plan": {"tp": 4, "pp": 4, "vp": 5, "gbs": 1024}}


@pytest.fixture(scope="module")
def local() -> Engine:
    return Engine(autoload=False)


def test_predict_by_preset_names(twin_stub, local):
    request = t.PredictRequest(scenario=s.Scenario(
        cluster=s.Cluster(system="DGX-H100", num_gpus=1024), model=s.Model(preset="llama3.1-70b"),
        plan=s.Plan(tp=4, pp=4, vp=5, gbs=1024)))
    est = twin_stub.Predict(request, timeout=10).estimate
    want = local.evaluate(ONE_LINE)
    assert est.step_time_s == want.step_time_s
    bd = est.breakdown
    parts = (bd.compute_s + bd.recompute_s + sum(bd.exposed_comm_s.values()) + bd.bubble_s + bd.optimizer_s
             + bd.offload_s + bd.overlap_interference_s)
    assert parts == pytest.approx(est.step_time_s, rel=1e-12) and bd.total_s == pytest.approx(est.step_time_s)
    assert bd.overlap_interference_s == want.breakdown.overlap_interference_s
    assert set(bd.exposed_comm_s) == set(want.breakdown.exposed_comm_s)
    mem = est.memory
    assert mem.fits is want.fits and mem.capacity_gib == pytest.approx(80.0)
    assert mem.total_gib == pytest.approx(want.memory.as_gib()["total_gib"])
    assert 0 < est.mfu < 1 and est.tokens_per_s == pytest.approx(want.tokens_per_s)
    assert est.fabric.fields["scale_out"].struct_value.fields["kind"].string_value == "infiniband"
    assert est.dp == want.dp and est.microbatches == want.microbatches


def test_predict_full_structured_scenario(twin_stub, local):
    """Every section spelled out with the wire names (units in the names) == the file form locally."""
    params = struct_pb2.Struct()
    params.update({"congestion_control": "dcqcn", "ecmp_flows_per_pair": 8})
    wire = s.Scenario(
        name="structured",
        cluster=s.Cluster(
            name="custom", num_gpus=256, gpus_per_node=8,
            gpu=s.Gpu(name="H100-custom", generation=s.GENERATION_HOPPER,
                      peak_tflops={"fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9},
                      hbm_gib=80, hbm_tbytes_per_s=3.35, sm_count=132, nvlink_gbytes_per_s=450, tdp_w=700,
                      efficiency_profile="hopper"),
            scale_up=s.ScaleUp(fabric="nvlink", generation=4, domain_gpus=8, nvls=True, link_gbytes_per_s=450),
            scale_out=s.ScaleOut(fabric="roce", nics_per_node=8, nic_gbits_per_s=400,
                                 topology=s.TOPOLOGY_FAT_TREE, switch_radix=64, tiers=2, oversubscription=[2.0],
                                 sharp=False, params=params),
            optics=s.Optics(kind=s.OPTICS_KIND_CPO),
            memory_pool=s.MemoryPool(fabric="cxl", capacity_gib_per_node=1024, bandwidth_gbytes_per_s_per_node=256,
                                     latency_ns=250, devices_per_node=4)),
        model=s.Model(name="moe-16x", layers=24, hidden=4096, heads=32, kv_heads=8, vocab=32000, seq_len=4096,
                      ffn=14336, gated_mlp=True, attention=s.ATTENTION_GQA,
                      moe=s.Moe(experts=16, top_k=2, expert_ffn=14336)),
        plan=s.Plan(tp=2, pp=2, ep=8, mbs=1, gbs=256, precision=s.PRECISION_BF16, recompute=s.RECOMPUTE_SELECTIVE,
                    optimizer_sharding=s.OPTIMIZER_SHARDING_DISTRIBUTED_OPTIMIZER,
                    grad_reduce_dtype=s.GRAD_REDUCE_DTYPE_BF16, overlap=s.Overlap(grad_reduce=True, tp_comm=False),
                    offload=s.Offload(optimizer=s.OFFLOAD_TARGET_CXL)),
        calibration=s.Calibration(compute_efficiency=0.95, scale_out_bandwidth=0.9))
    file_form = {
        "name": "structured",
        "cluster": {"name": "custom", "num_gpus": 256, "gpus_per_node": 8,
                    "gpu": {"name": "H100-custom", "generation": "hopper",
                            "peak_tflops": {"fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9},
                            "hbm_gib": 80, "hbm_TBps": 3.35, "sm_count": 132, "nvlink_GBps": 450, "tdp_w": 700,
                            "efficiency": "hopper"},
                    "scale_up": {"fabric": "nvlink", "generation": 4, "domain_gpus": 8, "nvls": True, "link_GBps": 450},
                    "scale_out": {"fabric": "roce", "nics_per_node": 8, "nic_gbps": 400, "topology": "fat_tree",
                                  "switch_radix": 64, "tiers": 2, "oversubscription": [2.0], "sharp": False,
                                  "params": {"congestion_control": "dcqcn", "ecmp_flows_per_pair": 8}},
                    "optics": {"kind": "cpo"},
                    "memory_pool": {"fabric": "cxl", "capacity_gib_per_node": 1024, "bandwidth_GBps_per_node": 256,
                                    "latency_ns": 250, "devices_per_node": 4}},
        "model": {"name": "moe-16x", "layers": 24, "hidden": 4096, "heads": 32, "kv_heads": 8, "vocab": 32000,
                  "seq_len": 4096, "ffn": 14336, "gated_mlp": True, "attention": "gqa",
                  "moe": {"experts": 16, "top_k": 2, "expert_ffn": 14336}},
        "plan": {"tp": 2, "pp": 2, "ep": 8, "mbs": 1, "gbs": 256, "precision": "bf16", "recompute": "selective",
                 "optimizer_sharding": "distributed_optimizer", "grad_reduce_dtype": "bf16",
                 "overlap": {"grad_reduce": True, "tp_comm": False}, "offload": {"optimizer": "cxl"}},
        "calibration": {"compute_efficiency": 0.95, "scale_out_bandwidth": 0.9},
    }
    got = estimate_from_message(twin_stub.Predict(t.PredictRequest(scenario=wire), timeout=10).estimate)
    want = local.evaluate(file_form)
    assert got.to_dict() == want.to_dict()
    assert got.step_time_s == want.step_time_s and got.memory.offloaded > 0
    assert got.fabric["optics"] == want.fabric["optics"]
    # The client's mapping -> message conversion produces the same message.
    assert scenario_from_mapping(file_form) == wire


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_examples_structured_and_document_agree_with_local(twin_stub, local, example):
    path = EXAMPLES / example
    want = local.evaluate(path).to_dict()
    client = TwinClient("unused")  # only for the file -> message conversion
    client.close()
    structured = twin_stub.Predict(t.PredictRequest(scenario=client._scenario(path)), timeout=10).estimate
    document = twin_stub.Predict(t.PredictRequest(scenario_document=path.read_text()), timeout=10).estimate
    assert estimate_from_message(structured).to_dict() == want
    assert estimate_from_message(document).to_dict() == want


def test_energy_and_cost_cross_the_wire(twin_stub, local):
    """The step's energy by component, and its cost only when the scenario gives prices."""
    priced = {**ONE_LINE, "cluster": {**ONE_LINE["cluster"], "power": {"gpu_idle_w": 100.0, "pue": 1.2},
                                      "prices": {"usd_per_gpu_hour": 2.0, "usd_per_kwh": 0.1}}}
    for scenario, has_cost in ((ONE_LINE, False), (priced, True)):
        msg = twin_stub.Predict(t.PredictRequest(scenario=scenario_from_mapping(scenario)), timeout=10).estimate
        want = local.evaluate(scenario)
        assert msg.HasField("energy") and msg.HasField("cost") is has_cost
        assert msg.energy.total_j == want.energy.total_j and msg.energy.host_j > 0
        got = estimate_from_message(msg)
        assert got.energy == want.energy and got.cost == want.cost


def test_omit_fabric_report(twin_stub):
    request = t.PredictRequest(scenario=scenario_from_mapping(ONE_LINE), omit_fabric_report=True)
    assert not twin_stub.Predict(request, timeout=10).estimate.fabric.fields


def test_validate(twin_stub):
    ok = twin_stub.Validate(t.ValidateRequest(scenario=scenario_from_mapping(ONE_LINE)), timeout=10)
    assert ok.valid and not ok.violations
    resolved = ok.resolved.fields
    assert resolved["cluster"].struct_value.fields["gpu"].struct_value.fields["name"].string_value == "H100-SXM-80GB"
    assert resolved["plan"].struct_value.fields["tp"].number_value == 4
    bad = twin_stub.Validate(t.ValidateRequest(scenario_document="cluster: {system: DGX-H100, num_gpus: 64}\n"
                                                                 "model: llama3.1-8b\nplan: {tp: 3, gbs: 64}\n"))
    assert not bad.valid and bad.violations[0].field == "plan.tp" and bad.violations[0].code == "INVALID_ARGUMENT"
    missing = twin_stub.Validate(t.ValidateRequest(scenario=scenario_from_mapping(
        {**ONE_LINE, "model": "no-such-model"})))
    assert missing.violations[0].code == "NOT_FOUND" and missing.violations[0].field == "model.preset"


def test_catalog_lists_everything_with_versions(twin_stub):
    cat = twin_stub.GetCatalog(t.GetCatalogRequest(), timeout=10).catalog
    assert cat.twin_version
    assert "H100-SXM-80GB" in {g.name for g in cat.gpus}
    assert {"DGX-H100", "GB200-NVL72"} <= {x.name for x in cat.systems}
    assert "llama3.1-405b" in {m.name for m in cat.models}
    assert {"hopper", "blackwell"} <= {e.name for e in cat.efficiency_profiles}
    kinds = {(f.role, f.kind) for f in cat.fabrics}
    assert {("scale_up", "nvlink"), ("scale_out", "infiniband"), ("scale_out", "roce"), ("memory", "cxl")} <= kinds
    assert {"tensor", "pipeline", "data"} <= {st.kind for st in cat.strategies}
    plugins = {p.name: p for p in cat.plugins}
    assert plugins["roce"].builtin and plugins["roce"].distribution == "fabric-twin" and plugins["roce"].version
    gpu = next(g for g in cat.gpus if g.name == "H100-SXM-80GB")
    assert gpu.spec.fields["hbm_gib"].number_value == 80 and "datasheet" in gpu.source


def test_python_client_and_cli_against_server(server, tmp_path):
    path = EXAMPLES / "gpt3-175b-dgx-h100-ib.yaml"
    with TwinClient(server.address) as client:
        assert client.health() == "SERVING"
        est = client.predict(path)
        assert est.to_dict() == Engine(autoload=False).evaluate(path).to_dict()
    env = {"PATH": "/usr/bin:/bin", "TWIN_DISABLE_PLUGIN_AUTOLOAD": "1"}
    out = subprocess.run([sys.executable, "-m", "twin.cli", "predict", "--server", server.address, "--json", str(path)],
                         capture_output=True, text=True, timeout=60, cwd=ROOT, env=env, check=False)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["step_time_s"] == est.step_time_s
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster: {system: DGX-H100, num_gpus: 64}\nmodel: llama3.1-8b\nplan: {tp: 3, gbs: 64}\n")
    out = subprocess.run([sys.executable, "-m", "twin.cli", "predict", "--server", server.address, str(bad)],
                         capture_output=True, text=True, timeout=60, cwd=ROOT, env=env, check=False)
    assert out.returncode == 2 and "plan.tp" in out.stderr and "Traceback" not in out.stderr
    cat = subprocess.run([sys.executable, "-m", "twin.cli", "catalog", "--server", server.address, "--json"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT, env=env, check=False)
    assert cat.returncode == 0, cat.stderr
    assert "DGX-H100" in {x["name"] for x in json.loads(cat.stdout)["systems"]}


def test_predict_fleet_over_grpc_matches_the_library(twin_stub, local):
    import yaml

    from twin.fleet_report import evaluate_fleet

    doc = (ROOT / "examples" / "fleets" / "two-jobs-roce.yaml").read_text()
    got = twin_stub.PredictFleet(t.PredictFleetRequest(fleet_document=doc), timeout=60)
    want = evaluate_fleet(local, yaml.safe_load(doc))
    assert [j.name for j in got.jobs] == [j.name for j in want.jobs]
    for g, w in zip(got.jobs, want.jobs, strict=True):
        assert g.step_time_shared_s == w.shared.step_time_s and g.step_time_alone_s == w.alone.step_time_s
        assert g.shared.step_time_s == w.shared.step_time_s
        assert list(g.nodes) == list(w.placement.nodes) and g.first_gpu == w.placement.first
        assert [c.links for c in g.contended] == [c["links"] for c in w.contended]
    assert got.jobs[0].contended and dict(got.jobs[0].contended[0].shared_with)


def test_predict_fleet_bad_input_names_the_field(twin_stub):
    import grpc

    from tests.server.test_errors import bad_field, call_error

    err = call_error(twin_stub.PredictFleet, t.PredictFleetRequest(fleet_document="cluster: {system: DGX-H100, "
                                                                                   "num_gpus: 16}\njobs: [7]"))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and bad_field(err) == "jobs[0]"
    err = call_error(twin_stub.PredictFleet, t.PredictFleetRequest())
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and bad_field(err) == "fleet_document"


def test_estimate_links_survive_the_wire(twin_stub, local):
    request = t.PredictRequest(scenario=scenario_from_mapping(ONE_LINE))
    est = estimate_from_message(twin_stub.Predict(request, timeout=10).estimate)
    want = local.evaluate(ONE_LINE)
    assert est.links == want.links and est.contention_s == want.contention_s
    assert any(link.tier == 1 for link in est.links)


def test_strategy_details_cross_the_wire(twin_stub, local):
    """What each strategy reports (here the pipeline schedule it ran) reaches the client."""
    piped = {**ONE_LINE, "plan": {**ONE_LINE["plan"], "pp": 2, "vp": 1, "schedule": "zero_bubble_h1"}}
    want = local.evaluate(piped)
    assert want.details["pp"]["schedule"] == "zero_bubble_h1"
    msg = twin_stub.Predict(t.PredictRequest(scenario=scenario_from_mapping(piped)), timeout=10).estimate
    got = estimate_from_message(msg)
    assert got.details == want.details and got.details["pp"]["schedule"] == "zero_bubble_h1"


def test_moe_dispatcher_crosses_the_wire(twin_stub, local):
    """plan.moe_dispatcher on the wire: each dispatcher's prediction is the local one."""
    steps = {}
    for dispatcher in ("alltoall", "deepep"):
        moe = {"cluster": {"system": "DGX-H100", "num_gpus": 64}, "model": "qwen3-235b-a22b",
               "plan": {"tp": 1, "ep": 16, "gbs": 256, "moe_dispatcher": dispatcher}}
        msg = twin_stub.Predict(t.PredictRequest(scenario=scenario_from_mapping(moe)), timeout=10).estimate
        assert msg.step_time_s == local.evaluate(moe).step_time_s
        steps[dispatcher] = msg.comm_issued_s["ep"]
    # An EP group over two NVLink domains: DeepEP sends fewer copies across them.
    assert steps["deepep"] < steps["alltoall"]


def test_every_software_switch_crosses_the_wire(twin_stub, local):
    """software.flash_attention and tp_comm_overlap in a structured scenario: the local prediction."""
    base = {"cluster": {"system": "DGX-H100", "num_gpus": 64}, "model": "llama3.1-8b",
            "plan": {"tp": 4, "gbs": 256}}
    steps = set()
    for switches in ({}, {"flash_attention": False}, {"tp_comm_overlap": False}):
        scn = {**base, "software": {"preset": "megatron-core-te", **switches}}
        msg = twin_stub.Predict(t.PredictRequest(scenario=scenario_from_mapping(scn)), timeout=10).estimate
        assert msg.step_time_s == local.evaluate(scn).step_time_s
        steps.add(msg.step_time_s)
    assert len(steps) == 3  # each switch changes the answer


def test_the_readmes_grpc_predict_example_fits_and_json_shows_fits_false_when_false(twin_stub):
    """README's grpcurl Predict example, sent as written: the plan fits; and with the defaults emitted
    (grpcurl -emit-defaults) a plan that does not fit reads ``"fits": false`` (proto3 JSON hides it otherwise).
    """
    import re

    from google.protobuf import json_format

    readme = (ROOT / "README.md").read_text()
    block = re.search(r"grpcurl -plaintext -emit-defaults -d '(.*?)' \\\n\s+127\.0\.0\.1:50051 "
                      r"twin\.rpc\.v1\.TwinService/Predict", readme, re.S)
    assert block, "README's grpcurl Predict example (with -emit-defaults) not found"
    request = json_format.Parse(block.group(1), t.PredictRequest())
    est = twin_stub.Predict(request, timeout=10).estimate
    assert est.memory.fits and est.memory.total_gib < est.memory.capacity_gib
    tight = t.PredictRequest()
    tight.CopyFrom(request)
    tight.scenario.plan.tp = 4  # README: "tp: 4 would need 82.0 GiB and does not"
    over = twin_stub.Predict(tight, timeout=10).estimate
    assert not over.memory.fits
    assert '"fits"' not in json_format.MessageToJson(over)  # what grpcurl prints without -emit-defaults
    shown = json.loads(json_format.MessageToJson(over, always_print_fields_with_no_presence=True))
    assert shown["memory"]["fits"] is False
