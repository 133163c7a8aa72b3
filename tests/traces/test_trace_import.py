"""``twin import trace``: real PyTorch profiler traces read in, compared with the twin, and bad files.

The traces in tests/traces/data were produced by torch.profiler (CPU PyTorch 2.13.0) running
tests/traces/data/make_traces.py (PROVENANCE.json says where and when); tinylm-cpu.yaml is that
run as a twin scenario. No torch is needed here; with torch installed, one more test profiles a
fresh run and reads it the same way.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from twin.core.errors import SpecError
from twin.engine import Engine
from twin.traces import chakra_schema as cs
from twin.traces.chakra_export import export
from twin.traces.chakra_import import measured_from_chakra
from twin.traces.kineto import classify_kernel, comm_op, measured_from_kineto
from twin.traces.trace_compare import compare

DATA = Path(__file__).resolve().parent / "data"
SINGLE = DATA / "tinylm_cpu.json.gz"
DDP = DATA / "tinylm_ddp_gloo_rank0.json.gz"
SCENARIO = DATA / "tinylm-cpu.yaml"
PROVENANCE = json.loads((DATA / "PROVENANCE.json").read_text())


def params_of(d):
    """The TinyLM's parameter count (make_traces.py: embedding, blocks with biases, final norm, head)."""
    h, f, v = d["hidden"], d["ffn"], d["vocab"]
    block = 2 * (2 * h) + (h * 3 * h + 3 * h) + (h * h + h) + (h * f + f) + (f * h + h)
    return v * h + d["layers"] * block + 2 * h + h * v


def twin(*args):
    return subprocess.run([sys.executable, "-m", "twin.cli", *args], capture_output=True, text=True, timeout=300,
                          env={"TWIN_DISABLE_PLUGIN_AUTOLOAD": "1", "PATH": "/usr/bin:/bin"}, check=False)


def test_a_real_cpu_profile_reads_as_classes_per_step():
    m = measured_from_kineto(SINGLE)
    assert m.kind == "kineto-cpu" and m.steps == PROVENANCE["profiler_schedule"]["active"]
    assert {"gemm", "attention", "elementwise", "optimizer"} <= set(m.classes)
    assert m.classes["gemm"].total_s > 0 and m.step_s > sum(v.total_s for v in m.classes.values()) * 0.5
    # Forward and backward GEMMs: 2 layers x 4 linear layers + the head, forward, each backward 2 mm.
    assert m.classes["gemm"].count >= 9 and not m.comm


def test_the_ddp_profile_has_its_gradient_all_reduces_with_their_sizes():
    m = measured_from_kineto(DDP)
    assert m.world_size == 2
    (key,) = m.comm
    assert key == "all_reduce@pg:default"
    # DDP all-reduces every fp32 gradient once per step (its buckets): 4 bytes a parameter.
    assert m.comm_bytes[key] == 4 * params_of(PROVENANCE["model"])


def test_compared_with_the_scenario_of_that_run():
    engine = Engine(autoload=False)
    scn = engine.scenario(SCENARIO)
    cmp = compare(measured_from_kineto(DDP), engine.step_anatomy(scn), {"compute_efficiency": 1.0}, 1)
    rows = {r.name: r for r in cmp.rows}
    assert set(rows) == {"attention", "other compute", "optimizer", "communication", "step"}
    assert all(r.measured_s > 0 and r.twin_s > 0 for r in rows.values())
    est = engine.evaluate(scn)
    assert rows["step"].twin_s == pytest.approx(est.step_time_s)
    assert rows["communication"].twin_s == pytest.approx(sum(est.comm_issued_s.values()))
    # The compute factor that makes the twin's compute the measured one; no bandwidth factor from a CPU trace.
    measured = rows["attention"].measured_s + rows["other compute"].measured_s
    twin_compute = est.breakdown.compute_s + est.breakdown.recompute_s
    assert cmp.calibration["compute_efficiency"] == pytest.approx(min(2.0, max(0.05, twin_compute / measured)))
    assert "scale_out_bandwidth" not in cmp.calibration and any("CPU trace" in n for n in cmp.notes)


def test_cli_prints_the_comparison_and_writes_a_calibration_a_scenario_takes(tmp_path):
    cal = tmp_path / "cal.yaml"
    out = twin("import", "trace", str(DDP), "--scenario", str(SCENARIO), "--calibration-out", str(cal))
    assert out.returncode == 0, out.stderr
    assert "Measured against the twin" in out.stdout and "other compute" in out.stdout
    assert "all_reduce@pg:default" in out.stdout
    doc = yaml.safe_load(SCENARIO.read_text())
    doc["calibration"] = yaml.safe_load(cal.read_text())["calibration"]
    calibrated = Engine(autoload=False).evaluate(doc)
    assert calibrated.breakdown.compute_s > Engine(autoload=False).evaluate(SCENARIO).breakdown.compute_s
    js = json.loads(twin("import", "trace", str(SINGLE), "--json").stdout)
    assert js["measured"]["kind"] == "kineto-cpu" and js["comparison"] is None


def test_a_chakra_trace_reads_in_too(tmp_path):
    engine = Engine(autoload=False)
    exported = export(engine.step_anatomy(SCENARIO), tmp_path)
    m = measured_from_chakra(exported.files[0])
    assert m.kind == "chakra" and m.classes and any(k.endswith("@dp") for k in m.comm)
    out = twin("import", "trace", str(exported.files[0]), "--scenario", str(SCENARIO))
    assert out.returncode == 0, out.stderr
    assert "chakra" in out.stdout


def test_kernel_names_of_a_gpu_trace_are_classed():
    # Names as CUDA kernels appear in Kineto GPU traces (cat "kernel"), and NCCL's.
    assert classify_kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64") == "gemm"
    assert classify_kernel("nvjet_hsh_128x256_64x4_2x1_v_bz_coopB_TNT") == "gemm"
    assert classify_kernel("flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128>>") == "attention"
    assert classify_kernel("cudnn_generated_fort_native_sdpa_sm90_flash_fprop") == "attention"
    assert classify_kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)") \
        == "communication"
    assert classify_kernel("multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor>") == "optimizer"
    assert classify_kernel("void at::native::vectorized_elementwise_kernel<4, GeluCUDAKernelImpl>") == "elementwise"
    assert comm_op("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", {}) == "reduce_scatter"
    assert comm_op("nccl:all_gather", {"Collective name": "_allgather_base"}) == "all_gather"


# ------------------------------------------------------------------ bad files: clear errors, exit 2
def write(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path


def good_chakra(tmp_path):
    exported = export(Engine(autoload=False).step_anatomy(SCENARIO), tmp_path / "et")
    return exported.files[0].read_bytes()


BAD_JSON = {
    "not-json.json": ("{not json", "not a Chrome-trace JSON"),
    "no-events.json": (json.dumps({"schemaVersion": 1}), "no traceEvents"),
    "event-no-dur.json": (json.dumps({"traceEvents": [{"ph": "X", "name": "aten::mm", "ts": 1}]}), "dur"),
    "event-not-object.json": (json.dumps({"traceEvents": [3]}), r"traceEvents\[0\]"),
    "empty-events.json": (json.dumps({"traceEvents": []}), "no complete"),
}


@pytest.mark.parametrize("name", sorted(BAD_JSON))
def test_malformed_profiler_traces_are_named_errors(tmp_path, name):
    text, says = BAD_JSON[name]
    path = write(tmp_path, name, text)
    with pytest.raises(SpecError, match=says):
        measured_from_kineto(path)
    out = twin("import", "trace", str(path))
    assert out.returncode == 2 and str(path) in out.stderr and "Traceback" not in out.stderr


def test_a_truncated_gzip_trace_is_a_named_error(tmp_path):
    data = gzip.compress(SINGLE.read_bytes())
    path = write(tmp_path, "cut.json.gz", gzip.compress(gzip.decompress(SINGLE.read_bytes()))[: len(data) // 2])
    out = twin("import", "trace", str(path))
    assert out.returncode == 2 and "Traceback" not in out.stderr and str(path) in out.stderr


@pytest.mark.parametrize("damage", ["truncated", "garbage", "dangling", "duplicate", "empty"])
def test_malformed_chakra_traces_are_named_errors(tmp_path, damage):
    pb = cs.schema()
    raw = good_chakra(tmp_path)
    meta = pb.GlobalMetadata(version="0.0.4")
    data = {"truncated": raw[: len(raw) - 7],
            "garbage": b"\xff" * 12 + b"\x00" * 20,
            "dangling": cs.encode([meta, pb.Node(id=1, name="a", type=pb.COMP_NODE, data_deps=[7])]),
            "duplicate": cs.encode([meta, pb.Node(id=1, name="a"), pb.Node(id=1, name="b")]),
            "empty": b""}[damage]
    path = write(tmp_path, f"{damage}.et", data)
    with pytest.raises(SpecError) as err:
        cs.read_trace(path)
    assert str(path) in str(err.value)
    out = twin("import", "trace", str(path))
    assert out.returncode == 2 and str(path) in out.stderr and "Traceback" not in out.stderr


def test_a_missing_file_and_a_calibration_without_scenario_are_errors(tmp_path):
    out = twin("import", "trace", str(tmp_path / "nope.json"))
    assert out.returncode == 2 and "cannot read" in out.stderr
    out = twin("import", "trace", str(SINGLE), "--calibration-out", str(tmp_path / "c.yaml"))
    assert out.returncode == 2 and "--calibration-out" in out.stderr


def test_without_the_traces_extra_chakra_names_it(tmp_path):
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, str(root / "tests" / "blockextras.py"), "traces", "export", "chakra",
                          str(SCENARIO), str(tmp_path / "x")], capture_output=True, text=True, timeout=300,
                         cwd=root, env={"TWIN_DISABLE_PLUGIN_AUTOLOAD": "1", "PATH": "/usr/bin:/bin"}, check=False)
    assert out.returncode == 2 and "'traces' extra" in out.stderr and "Traceback" not in out.stderr
    # A profiler's JSON needs no extra.
    out = subprocess.run([sys.executable, str(root / "tests" / "blockextras.py"), "traces", "import", "trace",
                          str(SINGLE)], capture_output=True, text=True, timeout=300, cwd=root,
                         env={"TWIN_DISABLE_PLUGIN_AUTOLOAD": "1", "PATH": "/usr/bin:/bin"}, check=False)
    assert out.returncode == 0, out.stderr
